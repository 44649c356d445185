"""claim_v2: free slots shared fairly among kinds, and the lease granted
returned with each job; claim (v0.1.0's) keeps its columns."""

from __future__ import annotations

import datetime as dt

from queue_sql import T0, register


async def _backlog(pool, kind: str, n: int) -> None:
    await pool.execute("insert into jobfeed.jobs (kind, target, run_after) "
                       "select $1, 't' || g, $2 from generate_series(1, $3) g", kind, T0, n)


async def _claim_v2(pool, kinds, limit):
    return await pool.fetch("select * from jobfeed.claim_v2($1, $2, 'w', null, $3)", list(kinds), limit, T0)


async def test_a_backlog_in_the_first_kind_leaves_slots_to_the_others(pool):
    for kind in ("a", "b", "c"):
        await register(pool, kind)
    await _backlog(pool, "a", 100)
    await _backlog(pool, "b", 100)
    await _backlog(pool, "c", 2)
    rows = await _claim_v2(pool, ["a", "b", "c"], 10)
    got = sorted(r["kind"] for r in rows)
    # c has only 2; the slots it leaves go to the kinds that had more
    assert got.count("c") == 2 and got.count("a") + got.count("b") == 8
    assert abs(got.count("a") - got.count("b")) <= 1
    # one slot: the kind named first gets it, so rotating the array takes turns
    assert [r["kind"] for r in await _claim_v2(pool, ["b", "a"], 1)] == ["b"]
    assert [r["kind"] for r in await _claim_v2(pool, ["a", "b"], 1)] == ["a"]
    # a kind named twice counts once, and the limit holds
    assert len(await _claim_v2(pool, ["a", "a", "b"], 7)) == 7


async def test_claim_returns_the_lease_it_granted_and_claim_v1_keeps_its_columns(pool):
    await register(pool, "k", lease="42 seconds")
    await _backlog(pool, "k", 3)
    row = (await _claim_v2(pool, ["k"], 1))[0]
    assert row["lease"] == dt.timedelta(seconds=42)
    assert row["lease_until"] == T0 + dt.timedelta(seconds=42)
    given = (await pool.fetch("select * from jobfeed.claim_v2(array['k'], 1, 'w', '7 seconds', $1)", T0))[0]
    assert given["lease"] == dt.timedelta(seconds=7)
    old = await pool.fetch("select * from jobfeed.claim(array['k'], 5, 'w', null, $1)", T0)
    assert len(old) == 1 and list(old[0].keys()) == [
        "id", "kind", "target", "payload", "attempts", "max_attempts", "generation", "lease_until", "checkpoint"]
