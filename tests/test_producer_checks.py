"""Queue.submit and submit_many check what a POST /api/jobs checks, and refuse
with QueueError (never asyncpg's errors), writing nothing: the kind's
validate(), a notify_url's host, the waiting fields, what PostgreSQL cannot
store; a run_after already past is now; max_payload is JOBFEED_MAX_PAYLOAD's.
A Queue on a connection adds its kind again after a rolled-back transaction."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import pytest

from jobfeed import Queue, QueueError, task
from jobfeed.api.app import create_app
from jobfeed.worker.settings import Settings
from servers import asgi_client, make_settings

UTC = dt.timezone.utc


def _small(payload: dict) -> None:
    if payload.get("n", 0) > 10:
        raise ValueError("n must be at most 10")


@task("checked", validate=_small)
async def checked(job, ctx):
    return None


async def jobs(pool) -> int:
    return await pool.fetchval("select count(*) from jobfeed.jobs")


@pytest.mark.parametrize("call, code", [
    (lambda q: q.submit("checked", "t", {"n": 11}), "invalid_payload"),
    (lambda q: q.submit_many("checked", [("a", {"n": 1}), ("b", {"n": 11})]), "invalid_payload"),
    (lambda q: q.submit("checked", "t", notify_url="http://127.0.0.1:9/hook"), "notify_url_not_allowed"),
    (lambda q: q.submit("checked", "t", after=["no-such-id"]), "unknown_dependency"),
    (lambda q: q.submit("checked", "t", await_signals=["a/b"]), "invalid_request"),
    (lambda q: q.submit("checked", "t", signal_timeout=5), "invalid_request"),  # without await_signals
    (lambda q: q.submit("checked", "t", await_signals=["go"], signal_timeout=1e12), "invalid_request"),
    (lambda q: q.submit("checked", "t", run_after=dt.datetime.now(UTC) + dt.timedelta(days=36500)),
     "invalid_run_at"),
    (lambda q: q.submit("checked", "t", concurrency_key=""), "invalid_concurrency_key"),
    (lambda q: q.submit("checked", "t", priority=2**40), "invalid_priority"),
    (lambda q: q.submit("checked", "a\x00b"), "invalid_target"),  # as HTTP answers it
    (lambda q: q.submit("checked", "t", {"note": "a\x00b"}), "invalid_payload"),
    (lambda q: q.submit("checked", "t", {"x": float("nan")}), "invalid_payload"),
    (lambda q: q.submit_many("checked", [("a", {"x": float("nan")})]), "invalid_payload"),
    (lambda q: q.signal("no-such-id", "go"), "not_found"),
])
async def test_a_refused_submission_is_a_queue_error_and_writes_nothing(pool, call, code):
    queue = Queue(pool, settings=Settings())  # no JOBFEED_WEBHOOK_HOSTS: every notify_url is refused
    with pytest.raises(QueueError) as refused:
        await call(queue)
    assert refused.value.code == code and 400 <= refused.value.status < 500, refused.value
    assert await jobs(pool) == 0
    assert await pool.fetchval("select count(*) from jobfeed.requests") == 0


@pytest.mark.parametrize("kw, code", [
    pytest.param({"priority": 1.5}, "invalid_priority", id="priority-float"),
    pytest.param({"priority": True}, "invalid_priority", id="priority-bool"),
    pytest.param({"priority": -2**31}, "invalid_priority", id="priority-below-range"),
    pytest.param({"await_signals": "go"}, "invalid_request", id="await-signals-string"),
    pytest.param({"after": str(uuid.uuid4())}, "invalid_request", id="after-string"),
    pytest.param({"run_after": "2030-01-01T00:00:00Z"}, "invalid_run_at", id="run-after-string"),
    pytest.param({"run_after": dt.date(2030, 1, 1)}, "invalid_run_at", id="run-after-date"),
    # only None is "not given": a falsy value was skipped, a dict taken as its keys
    *(pytest.param({field: value}, "invalid_request", id=f"{field}-{value!r}")
      for field in ("after", "await_signals") for value in ("", 0, False, {}, {"go": 1}, {"go"})),
    *(pytest.param({"concurrency_key": key}, "invalid_concurrency_key", id=f"concurrency-key-{n}")
      for n, key in enumerate(("", "k" * 513, 7, "a\x00", "\ud800"))),
    # an identity indexed as a target is: a long one was the database's index error
    *(pytest.param({"requester": who}, "invalid_requester", id=f"requester-{n}")
      for n, who in enumerate(("r" * 513, 5, "a\x00", "\ud800", b"me"))),
    *(pytest.param({flag: value}, "invalid_request", id=f"{flag}-{value!r}")
      for flag in ("request", "force") for value in ("yes", "no", 1, None)),
])
async def test_what_http_refuses_the_producer_refuses(pool, kw, code):
    """As POST /api/jobs answers 422: a priority that is no whole number in
    range, a string, a falsy value or an object where a list is due (not split
    into characters, skipped or taken as keys), a run_after that is no
    datetime, a concurrency key HTTP refuses; in submit and submit_many alike."""
    queue = Queue(pool, settings=Settings())
    calls = [lambda: queue.submit("checked", "t", **kw)]
    if set(kw) <= {"priority", "run_after", "concurrency_key"}:  # what submit_many takes too
        calls.append(lambda: queue.submit_many("checked", [("t", None)], **kw))
    for call in calls:
        with pytest.raises(QueueError) as refused:
            await call()
        assert (refused.value.code, refused.value.status) == (code, 422), refused.value
    assert await jobs(pool) == 0


async def test_any_iterable_is_taken_where_a_list_is_due(pool):
    """Before: a generator of items was spent by validate() and submit_many
    submitted nothing, answering []."""
    queue = Queue(pool, settings=Settings())
    made = await queue.submit_many("checked", ((f"g{n}", {"n": n}) for n in range(3)))
    assert len(made) == 3 and all(created for _, created in made)
    assert len(await queue.submit_many("checked", map(lambda n: (f"m{n}", None), range(2)))) == 2
    with pytest.raises(QueueError):  # the checks still see every item
        await queue.submit_many("checked", ((t, {"n": 11}) for t in ["bad"]))
    assert await jobs(pool) == 5
    first = made[0][0]
    state = "select state from jobfeed.jobs where id = $1"
    waits = await queue.submit("checked", "w", after=(i for i in (first,)), await_signals=("go",))
    assert await pool.fetchval(state, waits.id) == "waiting"
    for empty in ([], ()):  # nothing to wait for: a plain submission
        plain = await queue.submit("checked", f"e{empty!r}", after=empty, await_signals=empty)
        assert await pool.fetchval(state, plain.id) == "queued"


@pytest.mark.parametrize("name, data, code, status", [
    pytest.param("go\x00", None, "not_awaited", 409, id="name-nul"),
    pytest.param("", None, "not_awaited", 409, id="name-empty"),
    pytest.param("go", {"note": "a\x00b"}, "invalid_payload", 422, id="data-nul"),
    pytest.param("go", float("nan"), "invalid_payload", 422, id="data-nan"),
])
async def test_a_signal_http_refuses_is_a_queue_error(pool, name, data, code, status):
    queue = Queue(pool, settings=Settings())
    job = await queue.submit("checked", "t", await_signals=["go"])
    with pytest.raises(QueueError) as refused:
        await queue.signal(job.id, name, data)
    assert (refused.value.code, refused.value.status) == (code, status), refused.value
    assert (await queue.signal(job.id, "go", {"ok": 1}))[0]  # nothing was delivered before


async def test_an_empty_requester_is_nobody(pool):
    """As an empty JOBFEED_REQUESTER_HEADER is: no request row of its own, no cap, no dedupe by it."""
    queue = Queue(pool, settings=Settings())
    made = await queue.submit("checked", "t", requester="")
    assert made.request_id is None
    assert await pool.fetchval("select count(*) from jobfeed.requests") == 0
    long = await queue.submit("checked", "u", requester="r" * 512)  # the limit itself
    assert await pool.fetchval("select requester from jobfeed.requests where id = $1", long.request_id) == "r" * 512


@pytest.mark.parametrize("timeout", [float("nan"), -1, "5", True])
async def test_wait_refuses_a_timeout_that_is_no_duration(pool, timeout):
    queue = Queue(pool, settings=Settings())
    job = await queue.submit("checked", "t")
    with pytest.raises(ValueError, match="timeout must be seconds from 0"):
        await asyncio.wait_for(queue.wait(job.id, timeout), 5)  # NaN waited for ever
    assert (await queue.wait(job.id, 0))["status"] == "queued"


async def test_a_notify_url_on_an_allowed_host_is_taken(pool):
    queue = Queue(pool, settings=Settings(webhook_hosts=("127.0.0.1",)))
    s = await queue.submit("checked", "t", notify_url="http://127.0.0.1:9/hook")
    assert s.created and s.request_id is not None
    with pytest.raises(QueueError) as refused:  # credentials would sit in the database
        await queue.submit("checked", "u", notify_url="http://user:secret@127.0.0.1:9/hook")
    assert refused.value.code == "notify_url_not_allowed"


async def test_a_past_run_after_queues_as_submitted_now(pool):
    queue = Queue(pool, settings=Settings())
    first = (await queue.submit("checked", "first")).id
    backdated = await queue.submit("checked", "backdated", run_after=dt.datetime(2020, 1, 1, tzinfo=UTC))
    many = await queue.submit_many("checked", [("many", None)], run_after=dt.datetime(2020, 1, 1, tzinfo=UTC))
    assert (await queue.get_job(backdated.id))["scheduled_for"] is None
    assert [j.id for j in await queue.claim(["checked"], 1, "w")] == [first]
    assert {j.id for j in await queue.claim(["checked"], 5, "w")} == {backdated.id, many[0][0]}


async def test_max_payload_is_the_settings(pool):
    big = {"pad": "x" * 100_000}
    with pytest.raises(QueueError) as refused:
        await Queue(pool, settings=Settings()).submit("checked", "big", big)  # the default, 64 KiB
    assert refused.value.code == "payload_too_large"
    assert (await Queue(pool, settings=Settings(max_payload=1 << 20)).submit("checked", "big", big)).created
    with pytest.raises(QueueError) as refused:
        await Queue(pool, settings=Settings(max_payload=1024)).submit_many("checked", [("b", {"pad": "y" * 2048})])
    assert refused.value.code == "payload_too_large"


async def test_a_queue_on_a_connection_adds_its_kind_again_after_a_rollback(pool):
    """The kind was added inside the caller's transaction, which rolled back."""
    await pool.execute("delete from jobfeed.kinds where kind = 'checked'")
    async with pool.acquire() as conn:
        queue = Queue(conn, settings=Settings())
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await queue.submit("checked", "order-1")
                raise RuntimeError("the caller's own write failed")
        async with conn.transaction():
            s = await queue.submit("checked", "order-2")
    assert s.created and await jobs(pool) == 1
    assert await pool.fetchval("select count(*) from jobfeed.kinds where kind = 'checked'") == 1


async def test_an_unknown_job_id_for_a_signal_is_not_found(pool):
    with pytest.raises(QueueError) as refused:
        await Queue(pool).signal(uuid.uuid4(), "go")
    assert refused.value.code == "not_found"


async def test_a_queue_given_no_settings_takes_jobfeed_max_payload(pool, monkeypatch):
    monkeypatch.setenv("JOBFEED_MAX_PAYLOAD", "1KiB")
    with pytest.raises(QueueError) as refused:
        await Queue(pool).submit("checked", "b", {"pad": "y" * 2048})
    assert refused.value.code == "payload_too_large"


async def test_a_naive_run_after_is_refused_as_a_run_at_without_an_offset(pool, dsn):
    """A naive datetime names no one instant (it was taken as UTC, whatever
    the caller's clock meant), as "2031-01-01T00:00:00" over HTTP does not."""
    async with asgi_client(create_app(make_settings(dsn))) as client:
        answer = await client.post("/api/jobs", json={"kind": "checked", "target": "t",
                                                      "run_at": "2031-01-01T00:00:00"})
    over_http = (answer.json()["error"]["code"], answer.status_code)
    assert over_http == ("invalid_run_at", 422), answer.text
    queue = Queue(pool, settings=Settings())
    for naive in (dt.datetime(2031, 1, 1), dt.datetime(2020, 1, 1)):  # ahead or past alike
        for call in (queue.submit("checked", "t", run_after=naive),
                     queue.submit_many("checked", [("t", None)], run_after=naive)):
            with pytest.raises(QueueError) as refused:
                await call
            assert (refused.value.code, refused.value.status) == over_http, refused.value
    assert await jobs(pool) == 0
    paris = dt.timezone(dt.timedelta(hours=1))  # an aware one, any offset, is its instant
    made = await queue.submit("checked", "t", run_after=dt.datetime(2031, 1, 1, 1, tzinfo=paris))
    assert (await queue.get_job(made.id))["scheduled_for"].startswith("2031-01-01T00:00:00")


@pytest.mark.parametrize("kind, target, payload", [
    pytest.param(None, "t", None, id="kind-none"),
    pytest.param(5, "t", None, id="kind-number"),
    pytest.param("", "t", None, id="kind-empty"),
    pytest.param("checked", 5, None, id="target-number"),
    pytest.param("checked", None, None, id="target-none"),
    pytest.param("checked", "a\x00b", None, id="target-nul"),
    pytest.param("checked", "t", [1], id="payload-list"),
])
async def test_a_kind_target_or_payload_is_refused_as_over_http(pool, dsn, kind, target, payload):
    """Queue.submit and submit_many answer the code and status POST /api/jobs
    answers for the same fields. Before: a kind that is no string was unknown_kind (HTTP:
    invalid_request), a target that is no string invalid_input (HTTP:
    invalid_target)."""
    body = {"kind": kind, "target": target, "payload": {} if payload is None else payload}
    async with asgi_client(create_app(make_settings(dsn))) as client:
        answer = await client.post("/api/jobs", json=body)
    over_http = (answer.json()["error"]["code"], answer.status_code)
    assert over_http[1] == 422, answer.text
    queue = Queue(pool, settings=Settings())
    for call in (queue.submit(kind, target, payload), queue.submit_many(kind, [(target, payload)])):
        with pytest.raises(QueueError) as refused:
            await call
        assert (refused.value.code, refused.value.status) == over_http, refused.value
    with pytest.raises(QueueError) as refused:  # not json.dumps's TypeError
        await queue.submit("checked", "t", {1, 2})  # type: ignore[arg-type]
    assert (refused.value.code, refused.value.status) == ("invalid_payload", 422), refused.value
    assert await jobs(pool) == 0


async def test_a_payload_holding_what_json_cannot_write_is_refused(pool):
    """A datetime or a set inside the payload, or a cycle, is invalid_payload
    from submit, submit_many and a request's submit alike. Before: json.dumps's
    TypeError (ValueError for the cycle) out of the queue."""
    queue = Queue(pool, settings=Settings())
    cycle: dict = {}
    cycle["self"] = cycle
    for payload in ({"at": dt.datetime.now(dt.timezone.utc)}, {"tags": {"a"}}, cycle):
        for call in (queue.submit("checked", "t", payload), queue.submit("checked", "t", payload, request=True),
                     queue.submit_many("checked", [("a", None), ("t", payload)])):
            with pytest.raises(QueueError) as refused:
                await call
            assert (refused.value.code, refused.value.status) == ("invalid_payload", 422), refused.value
        assert refused.value.message.startswith("item 2: "), refused.value.message  # the batch's, last
    assert await jobs(pool) == 0


async def test_a_payload_postgresql_cannot_store_is_refused_naming_its_item(pool):
    """NaN, Infinity, a NUL or a lone surrogate in a payload: invalid_payload,
    as HTTP answers, and a batch says which item. Before: the database refused
    them (invalid_input), naming no item. A backslash before u0000 is no NUL,
    and a surrogate pair (an emoji) is stored."""
    queue = Queue(pool, settings=Settings())
    for payload in ({"x": float("nan")}, {"x": [float("-inf")]}, {"note": "a\x00b"}, {"k\x00": 1},
                    {"x": "\ud800"}, {"x": "\udfff\ud800"}):
        with pytest.raises(QueueError) as refused:
            await queue.submit_many("checked", [("a", None), ("b", payload)])
        assert (refused.value.code, refused.value.message[:8]) == ("invalid_payload", "item 2: "), refused.value
        with pytest.raises(QueueError) as refused:
            await queue.submit("checked", "t", payload)
        assert refused.value.code == "invalid_payload", refused.value
    assert await jobs(pool) == 0
    s = await queue.submit("checked", "t", {"note": "\\u0000 \U0001F600"})
    assert (await queue.get_job(s.id))["id"] == str(s.id)
    assert await pool.fetchval("select payload->>'note' from jobfeed.jobs") == "\\u0000 \U0001F600"


@pytest.mark.parametrize("item, code", [
    pytest.param("ab", "invalid_request", id="string"),  # was taken as ("a", "b")
    pytest.param(("b",), "invalid_request", id="one"),
    pytest.param(("b", None, None), "invalid_request", id="three"),
    pytest.param(None, "invalid_request", id="none"),
    pytest.param((5, None), "invalid_target", id="target-number"),
    pytest.param(("b", [1]), "invalid_payload", id="payload-list"),
    pytest.param(("b", {1}), "invalid_payload", id="payload-set"),  # was json.dumps's TypeError
    pytest.param(("b", {"n": 11}), "invalid_payload", id="payload-validate"),
])
async def test_a_malformed_batch_item_is_a_queue_error_naming_it(pool, item, code):
    """As the database names the first bad item of a batch (item 1 is the
    first), and nothing of the batch is written. Before: ValueError or
    TypeError from unpacking the item or building the batch."""
    queue = Queue(pool, settings=Settings())
    with pytest.raises(QueueError) as refused:
        await queue.submit_many("checked", [("a", None), item, ("c", None)])
    assert (refused.value.code, refused.value.status) == (code, 422), refused.value
    assert refused.value.message.startswith("item 2: "), refused.value.message
    assert await jobs(pool) == 0
    made = await queue.submit_many("checked", [("a", None), ["b", {"n": 1}]])  # a list is a pair too
    assert len(made) == 2
