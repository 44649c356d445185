"""@task(dedupe="requester"): the requester identity is part of the dedupe key,
so strangers never share a job; a submission without an identity never
shares. Python, batches, HTTP (the group commit) and races."""

from __future__ import annotations

import asyncio

import pytest

from jobfeed.worker import db
from jobfeed.worker.queue import Queue, Submission

from queue_sql import register



async def _noop(job, ctx):
    return None

@pytest.fixture
async def mine(pool):
    await register(pool, "mine")
    await pool.execute("select jobfeed.set_kind_request_policy_v2('mine', 'cancel', 'join', null, 'requester')")
    await register(pool, "mine_cached")
    await pool.execute("select jobfeed.set_kind_request_policy_v2('mine_cached', 'cancel', 'join', "
                       "'10 minutes', 'requester')")


async def test_one_job_per_identity_and_none_shared_without_one(pool, queue, mine):
    a1 = await queue.submit("mine", "t", {"v": 1}, requester="alice")
    a2 = await queue.submit("mine", "t", {"v": 2}, requester="alice")
    b = await queue.submit("mine", "t", requester="bob")
    assert a1.created and not a2.created and a2.id == a1.id
    assert b.created and b.id != a1.id
    assert (await queue.get_job(a1.id))["requesters"] == 2
    assert (await queue.get_job(b.id))["requesters"] == 1
    # no identity: never shares, neither with one another nor with anyone named
    anon = [await queue.submit("mine", "t", request=True) for _ in range(2)]
    bare = [await queue.submit("mine", "t") for _ in range(2)]
    assert all(s.created for s in anon + bare)
    assert len({s.id for s in anon + bare} | {a1.id, b.id}) == 6
    # the same target under a "global" kind still has one job
    await register(pool, "shared")
    assert (await queue.submit("shared", "t", requester="alice")).id == \
        (await queue.submit("shared", "t", requester="bob")).id
    # leaving alice's job cancels only hers
    await queue.leave(a1.request_id)
    await queue.leave(a2.request_id)
    assert (await queue.get_job(a1.id))["status"] == "canceled"
    assert (await queue.get_job(b.id))["status"] == "queued"
    again = await queue.submit("mine", "t", requester="alice")
    assert again.created and again.id not in (a1.id, b.id)


async def test_batches_share_by_target_and_identity(pool, queue, mine):
    first = await queue.submit("mine", "t", requester="alice")
    answers = await queue.submit_many_requests_json(
        "mine", [("t", None), ("t", None), ("t", None), ("u", None), ("t", None), ("t", None)],
        requesters=["bob", "alice", "bob", "alice", None, None], notify_urls=[None] * 6)
    ids = [a[0] for a in answers]
    created = [a[1] for a in answers]
    assert created == [True, False, False, True, True, True]
    assert ids[1] == first.id and ids[2] == ids[0] != first.id
    assert len(set(ids)) == 5  # bob's t, alice's t, alice's u, two anonymous
    assert all(a[3] for a in answers)  # each item its own request
    # bare batches (no request) of a requester kind: no item shares
    bare = await queue.submit_many("mine", [("t", None), ("t", None)])
    assert all(c for _, c in bare) and len({i for i, _ in bare} | set(ids)) == 7


async def test_reuse_for_reuses_only_the_same_identitys_result(pool, queue, mine):
    a = await queue.submit("mine_cached", "r", requester="alice")
    (job,) = await queue.claim(["mine_cached"], 1, "w")
    assert await queue.complete(job.id, job.generation, {"n": 1})
    again = await queue.submit("mine_cached", "r", requester="alice")
    assert (again.id, again.reused) == (a.id, True)
    other = await queue.submit("mine_cached", "r", requester="bob")
    anon = await queue.submit("mine_cached", "r", request=True)
    assert other.created and not other.reused and anon.created and not anon.reused
    (batched,) = await queue.submit_many_requests_json("mine_cached", [("r", None)], requesters=["carol"],
                                                       notify_urls=[None])
    assert batched[1] and not batched[4]


async def test_100_racing_submitters_two_identities_one_job_each(dsn, mine):
    big = await db.create_pool(dsn, min_size=20, max_size=20)
    try:
        q = Queue(big)

        async def one(n: int):
            who = ("alice", "bob")[n % 2]
            if n % 3 == 0:  # some as batches, which go item by item in one order
                rows = await q.submit_many_requests_json("mine", [("race", None), ("race", None)],
                                                         requesters=[who, ("alice", "bob")[(n + 1) % 2]],
                                                         notify_urls=[None, None])
                return [(who, rows[0][0]), (("alice", "bob")[(n + 1) % 2], rows[1][0])]
            s = await q.submit("mine", "race", requester=who)
            return [(who, s.id)]

        results = [pair for r in await asyncio.gather(*(one(n) for n in range(100))) for pair in r]
        by_who: dict[str, set] = {}
        for who, job_id in results:
            by_who.setdefault(who, set()).add(job_id)
        assert {w: len(ids) for w, ids in by_who.items()} == {"alice": 1, "bob": 1}
        assert by_who["alice"] != by_who["bob"]
        assert await big.fetchval("select count(*) from jobfeed.jobs where kind = 'mine'") == 2
        total = await big.fetchval("select sum(requesters) from jobfeed.jobs where kind = 'mine'")
        assert total == len(results)
    finally:
        await big.close()


async def test_http_identity_scopes_dedupe_through_the_group_commit(dsn, queue):
    import httpx
    from servers import serve
    async with serve(dsn, requester_header="x-user") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            await queue.set_kind_request_policy("demo", dedupe="requester")

            async def post(who: str | None):
                headers = {"X-User": who} if who else {}
                r = await http.post("/api/jobs", json={"kind": "demo", "target": "v"}, headers=headers)
                assert r.status_code in (200, 201), r.text
                return who, r.json()

            # concurrent: they reach the group commit together, in shared batches
            answers = await asyncio.gather(*(post(("alice", "bob", None)[n % 3]) for n in range(60)))
            ids: dict[str | None, set] = {}
            for who, body in answers:
                ids.setdefault(who, set()).add(body["id"])
            assert len(ids["alice"]) == 1 and len(ids["bob"]) == 1 and ids["alice"] != ids["bob"]
            assert len(ids[None]) == 20  # anonymous: never shared
            alice = await queue.get_job(next(iter(ids["alice"])))
            assert alice["requesters"] == 20


def test_task_takes_dedupe():
    from jobfeed.worker.tasks import Registry
    reg = Registry()
    with pytest.raises(ValueError):
        reg.task("x", dedupe="person")
    reg.task("ok", dedupe="requester")(_noop)
    assert reg.get("ok").dedupe == "requester"
    reg.task("plain")(_noop)
    assert reg.get("plain").dedupe == "global"


async def test_a_worker_records_the_kinds_dedupe(pool, queue):
    from jobfeed.worker.settings import Settings
    from jobfeed.worker.tasks import Registry, register_kind
    reg = Registry()
    reg.task("scoped", dedupe="requester")(_noop)
    (spec,) = reg.specs(Settings.from_env({}))
    await register_kind(queue, spec, overwrite=True)
    assert await pool.fetchval("select dedupe from jobfeed.kinds where kind = 'scoped'") == "requester"
    a = await queue.submit("scoped", "t", requester="a")
    assert a != Submission(a.id, False, False, None) and a.created
    assert (await queue.submit("scoped", "t", requester="b")).id != a.id
