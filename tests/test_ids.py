"""Job ids are UUID version 7: time-ordered, so newest-first listing is id order."""

from __future__ import annotations

import datetime as dt
import uuid


async def test_ids_are_version_7_and_carry_their_time(pool):
    at = dt.datetime(2026, 11, 30, 12, 0, 0, 123000, tzinfo=dt.timezone.utc)
    ids = [await pool.fetchval("select jobfeed.uuid_v7($1)", at) for _ in range(50)]
    assert len(set(ids)) == 50
    for i in ids:
        assert i.version == 7 and i.variant == uuid.RFC_4122
        assert int.from_bytes(i.bytes[:6], "big") == int(at.timestamp() * 1000)


async def test_later_ids_sort_after_earlier_ones(pool):
    # a quarter of a millisecond apart: the order holds within a millisecond too
    rows = await pool.fetch("select jobfeed.uuid_v7(now() + g * interval '250 microseconds') as id "
                            "from generate_series(1, 400) g")
    ids = [r["id"] for r in rows]
    assert ids == sorted(ids)


async def test_ids_of_one_statement_and_of_two_sessions_never_repeat(pool, dsn):
    """The random bits come from a secret per session and random(): many ids in
    one statement (the same millisecond) are distinct, two sessions draw
    different secrets, and the variant bits stay RFC 4122's."""
    rows = await pool.fetch("select jobfeed.uuid_v7(timestamptz '2030-01-01') as id from generate_series(1, 20000)")
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids)
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)
    async with pool.acquire() as a, pool.acquire() as b:
        seeds = {await c.fetchval("select jobfeed.id_seed()") for c in (a, b)}
        assert len(seeds) == 2 and all(len(s) >= 32 for s in seeds)
        # the secret stays for the session
        assert await a.fetchval("select jobfeed.id_seed()") in seeds
