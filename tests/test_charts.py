"""The dashboard's charts in SQL: depth samples (kept two hours, shown one),
wait p50/p95 of jobs finished in the last hour, failures by kind and code."""

from __future__ import annotations

import datetime as dt
import json

T0 = dt.datetime(2026, 12, 1, 3, 0, tzinfo=dt.timezone.utc)


async def charts(pool, at: dt.datetime) -> dict:
    return json.loads(await pool.fetchval("select jobfeed.charts($1)::text", at))


async def test_depth_samples_wait_percentiles_and_failures_by_code(pool, k):
    for i in range(4):
        await pool.execute("select jobfeed.submit('k', $1, '{}', null, 65536, $2)", f"q{i}", T0)
    assert await pool.fetchval("select jobfeed.sample_depth($1)", T0) == 1
    # four jobs: waited 1, 2, 3, 4 seconds once due; two completed, two failed (codes a, b)
    ids = [r["id"] for r in await pool.fetch("select id from jobfeed.jobs order by target")]
    for n, (job_id, state, code) in enumerate(zip(ids, ["completed", "completed", "failed", "failed"],
                                                  [None, None, "a", "b"]), start=1):
        await pool.execute("""update jobfeed.jobs set state = $2::jobfeed.job_state, run_after = $3::timestamptz,
                                  claimed_at = $3::timestamptz + make_interval(secs => $4), finished_at = $3::timestamptz + interval '5 s',
                                  last_error_code = $5 where id = $1""", job_id, state, T0, float(n), code)
    await pool.execute("select jobfeed.sample_depth($1)", T0 + dt.timedelta(minutes=1))
    got = await charts(pool, T0 + dt.timedelta(minutes=2))
    assert [(d["kind"], d["queued"]) for d in got["depth"]] == [("k", 4), ("k", 0)]
    [wait] = got["wait"]
    assert wait["kind"] == "k" and wait["jobs"] == 4
    assert abs(wait["p50"] - 2.5) < 1e-9 and abs(wait["p95"] - 3.85) < 1e-9
    assert sorted((f["code"], f["jobs"]) for f in got["failures"]) == [("a", 1), ("b", 1)]
    later = await charts(pool, T0 + dt.timedelta(minutes=90))
    assert later["depth"] == [] and later["wait"] == [] and later["failures"] == []
    await pool.execute("select jobfeed.sample_depth($1)", T0 + dt.timedelta(hours=3))
    assert await pool.fetchval("select count(*) from jobfeed.depth_samples") == 1  # older than two hours: gone


async def test_reading_the_stats_samples_depth_without_a_sweeper(pool, k):
    """No sweeper runs: the stats snapshot's recount (the dashboard, /metrics)
    records a depth sample from its own counts, at most one a minute."""
    for i in range(3):
        await pool.execute("select jobfeed.submit('k', $1, '{}', null, 65536, $2)", f"q{i}", T0)

    async def read_stats(at: dt.datetime) -> None:
        await pool.fetchval("select jobfeed.stats_v2(15, '5 seconds', $1)", at)

    await read_stats(T0)
    await read_stats(T0 + dt.timedelta(seconds=30))  # recounted (snapshot 30 s old), no new sample
    await pool.execute("update jobfeed.jobs set state = 'running' where target = 'q0'")
    await read_stats(T0 + dt.timedelta(seconds=61))
    got = await charts(pool, T0 + dt.timedelta(minutes=2))
    assert [(d["kind"], d["queued"], d["running"]) for d in got["depth"]] == [("k", 3, 0), ("k", 2, 1)]
