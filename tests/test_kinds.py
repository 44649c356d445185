"""Kinds live in the database. Workers (which run a kind) set its settings;
other processes only add a kind nobody has registered, never undo a worker's."""

from __future__ import annotations


async def lease_of(pool, kind: str):
    return await pool.fetchval("select extract(epoch from lease)::int from jobfeed.kinds where kind = $1", kind)


async def test_only_an_overwriting_registration_changes_a_kind(queue, pool):
    await queue.register_kind("mail", max_attempts=3, lease=60, backoff=(1,), overwrite=True)
    await queue.register_kind("mail", max_attempts=9, lease=999, backoff=(5,), overwrite=False)
    assert await lease_of(pool, "mail") == 60
    await queue.register_kind("mail", max_attempts=3, lease=120, backoff=(1,), overwrite=True)
    assert await lease_of(pool, "mail") == 120
    await queue.register_kind("video", max_attempts=2, lease=30, backoff=(1,), overwrite=False)
    assert await lease_of(pool, "video") == 30
    kinds = {k["kind"]: k for k in await queue.list_kinds()}
    assert kinds["mail"]["lease_seconds"] == 120 and kinds["video"]["max_attempts"] == 2


async def test_a_new_kinds_settings_apply_to_jobs_submitted_after(queue, pool):
    await queue.register_kind("mail", max_attempts=2, lease=60, backoff=(1,))
    job_id, _ = await queue.submit("mail", "m1")
    assert (await queue.admin_get_job(job_id))["max_attempts"] == 2
