"""Kinds live in the database. Workers (which run a kind) set its settings;
other processes only add a kind nobody has registered, never undo a worker's.
And @task refuses at decoration what would fail a worker's start or a job's
every attempt."""

from __future__ import annotations

import functools

import pytest

from jobfeed.worker.tasks import Registry


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


async def test_the_kinds_list_shows_how_duplicates_and_leavers_are_handled(queue):
    await queue.register_kind("mail", max_attempts=3, lease=60, backoff=(1,))
    await queue.register_kind("video", max_attempts=3, lease=60, backoff=(1,))
    await queue.set_kind_request_policy("video", on_abandon="keep", on_duplicate="rerun", reuse_for=600,
                                        dedupe="requester")
    kinds = {k["kind"]: k for k in await queue.list_kinds()}
    policy = ("dedupe", "on_duplicate", "on_abandon", "reuse_for_seconds")
    assert [kinds["mail"][p] for p in policy] == ["global", "join", "cancel", None]
    assert [kinds["video"][p] for p in policy] == ["requester", "rerun", "keep", 600]


@pytest.mark.parametrize("option, value", [("on_abandon", "stay"), ("dedupe", "person"), ("on_duplicate", "merge")])
def test_a_choice_the_kinds_table_would_refuse_is_refused_at_decoration(option, value):
    with pytest.raises(ValueError, match=f"{option} must be one of .*not '{value}'"):
        Registry().task("k", **{option: value})


async def test_a_new_kinds_settings_apply_to_jobs_submitted_after(queue, pool):
    await queue.register_kind("mail", max_attempts=2, lease=60, backoff=(1,))
    job_id, _ = await queue.submit("mail", "m1")
    assert (await queue.admin_get_job(job_id))["max_attempts"] == 2


@pytest.mark.parametrize("options, message", [
    ({"lease": -1}, "lease must be longer than zero"),
    # a lease the heartbeat could not renew in time, a rate period an interval rounds to none
    ({"lease": 0.1}, "lease: '0.1' is shorter than the least allowed, 150ms"),
    ({"lease": "0.4ms"}, "lease: '0.4ms' is shorter than the least allowed, 150ms"),
    ({"rate": "1/0.0000001s"}, "rate period: '0.0000001s' is shorter than the least allowed, 1ms"),
    ({"rate": "1/0.9ms"}, "rate period"),
    ({"lease": "soon"}, "lease"),
    ({"lease": [5]}, "neither seconds nor a duration"),
    ({"backoff": ()}, "at least one delay"),
    ({"backoff": (-1,)}, "none below zero"),
    ({"backoff": "1m,,5m"}, "backoff"),
    ({"jitter": 2}, "jitter must be a number from 0 to 1"),
    ({"max_attempts": 0}, "max_attempts must be a whole number from 1 to"),
    ({"max_attempts": True}, "max_attempts"),
    # what the kinds table's int columns cannot hold is refused here, naming the option,
    # not when a worker registers the kind
    ({"max_attempts": 2**31}, "max_attempts must be a whole number from 1 to 2147483647"),
    ({"priority": 2**40}, "priority must be a whole number from -2147483647 to 2147483647"),
    ({"priority": -2**31}, "priority"),
    ({"max_running": 2**31}, "max_running must be a whole number from 1 to 2147483647"),
    ({"max_running_per_key": 2**31}, "max_running_per_key must be"),
    ({"rate": "3000000000/1m"}, "rate: '3000000000/1m' needs from 1 to 2147483647 starts"),
    # durations an interval cannot hold (or that a worker could not sleep on)
    ({"every": 1e12}, "every: 1000000000000.0 must be from 1 ms to 1,000,000,000 seconds"),
    ({"timeout": float("nan")}, "timeout: nan must be from 1 ms"),
    ({"lease": float("inf")}, "lease: inf must be from 150 ms"),
    ({"lease": 1e-9}, "lease: '1e-09' is shorter than the least allowed, 150ms"),
    ({"timeout": 1e-9}, "timeout: '1e-09' is shorter than the least allowed, 1ms"),
])
def test_options_the_kinds_table_cannot_hold_are_refused_at_decoration(options, message):
    with pytest.raises(ValueError, match=message):
        Registry().task("k", **options)


@pytest.mark.parametrize("kind", ["", " k", "a/b", "jobfeed.webhook"])
def test_a_kind_name_no_route_could_name_is_refused(kind):
    with pytest.raises(ValueError, match="a kind's name"):
        Registry().task(kind)


def test_durations_are_taken_for_lease_and_backoff():
    reg = Registry()
    reg.task("least", lease="150ms", rate="1/1ms")(_run)
    assert (reg.get("least").lease, reg.get("least").rate) == (0.15, (1, 0.001))
    reg.task("k", lease="5m", backoff="1m,5m")(_run)
    reg.task("j", lease=30, backoff=("1s", 60))(_run)
    assert (reg.get("k").lease, reg.get("k").backoff) == (300.0, (60.0, 300.0))
    assert (reg.get("j").lease, reg.get("j").backoff) == (30.0, (1.0, 60.0))


async def _run(job, ctx):
    return None


class _Callable:
    async def __call__(self, job, ctx):
        return None


def test_a_handler_that_cannot_be_awaited_as_handler_job_ctx_is_refused():
    reg = Registry()

    def sync(job, ctx):
        return None

    async def one(job):
        return None

    for handler, message in ((sync, "must be an async function"), (lambda job, ctx: None, "must be an async function"),
                             (one, "called with two arguments")):
        with pytest.raises(TypeError, match=message):
            reg.task("k")(handler)
    assert reg.get("k") is None
    with pytest.raises(TypeError, match="needs the kind's name first"):
        reg.task(_run)  # a bare @task
    reg.task("k")(_Callable())  # an object with an async __call__ is a handler too
    reg.task("p")(functools.partial(_run))


def test_registering_a_kind_twice_says_which_handler_won(caplog):
    reg = Registry()
    reg.task("k")(_run)
    reg.task("k")(_run)  # the same handler again (a module imported twice): nothing to say
    assert not caplog.records

    async def second(job, ctx):
        return None
    reg.task("k")(second)
    assert reg.get("k").handler is second
    assert "@task('k') registered again" in caplog.text and "second replaces" in caplog.text
