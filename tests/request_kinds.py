"""The kinds the request tests submit to, one per request policy: k (the
defaults: join, cancel when abandoned), kept (keep), strict (reject_different)
and cached (reuse a completion for 10 minutes)."""

from __future__ import annotations

import pytest

from queue_sql import register


@pytest.fixture
async def k(pool):
    await register(pool, "k")
    await register(pool, "kept")
    await pool.execute("select jobfeed.set_kind_request_policy('kept', 'keep')")
    await register(pool, "strict")
    await pool.execute("select jobfeed.set_kind_request_policy('strict', 'cancel', 'reject_different')")
    await register(pool, "cached")
    await pool.execute("select jobfeed.set_kind_request_policy('cached', 'cancel', 'join', '10 minutes')")
