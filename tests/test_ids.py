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
