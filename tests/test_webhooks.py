"""Webhooks against a real HTTP receiver on 127.0.0.1: the host allow-list
(422 notify_url_not_allowed), a delivery per waiting request when the job is
final, Standard Webhooks signatures that the reference library verifies, and
retries with the same webhook-id until the receiver takes it."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json

import httpx
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from jobfeed.worker.metrics import PROCESS
from jobfeed.worker.queue import QueueError
from jobfeed.worker.runner import Runner
from jobfeed.worker.settings import SettingError, Settings
from jobfeed.worker.startup import warn_unsigned_webhooks
from jobfeed.worker.submission import host_allowed

from servers import serve
from queue_sql import ATTEMPTS
from waiting import eventually

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


class Receiver:
    """A tiny HTTP server: records each POST (headers, body) and answers with
    the next status of `statuses` (the last one repeats)."""

    def __init__(self, statuses=(204,), headers="", then=None):
        self.statuses = list(statuses)
        self.headers = headers  # more header lines, each ending in \r\n
        self.then = then  # after the head: a coroutine given the writer, in place of closing
        self.got: list[tuple[dict, bytes]] = []
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        for writer in self.writers:  # a `then` still at work sees it closing
            writer.close()
        self.server.close()
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _handle(self, reader, writer):
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.got.append((headers, body))
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        if self.then is not None:
            self.writers.append(writer)
            return await self.then(status, writer)
        writer.write(f"HTTP/1.1 {status} X\r\n{self.headers}content-length: 0\r\nconnection: close\r\n\r\n"
                     .encode())
        await writer.drain()
        writer.close()


@pytest.fixture
def webhook_env(monkeypatch):
    from jobfeed.worker import webhooks
    monkeypatch.setenv("JOBFEED_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("JOBFEED_WEBHOOK_HOSTS", "127.0.0.1,localhost")
    webhooks._settings.cache_clear()
    yield webhooks
    webhooks._settings.cache_clear()


@pytest.fixture
async def webhook_worker(queue, dsn, webhook_env):
    spec = dataclasses.replace(webhook_env.SPEC, backoff=(0.05,), lease=5.0, jitter=0.0)
    await queue.register_kind(spec.kind, max_attempts=spec.max_attempts, lease=spec.lease, backoff=spec.backoff,
                              jitter=0.0)
    runner = Runner(queue, dsn, [spec], poll_interval=0.1, grace=1.0)
    task = asyncio.create_task(runner.run())
    yield runner
    runner.stop()
    await asyncio.wait_for(task, 10)


def deliveries(outcome: str) -> float:
    """jobfeed_webhook_deliveries_total{outcome} in this process (the runner's)."""
    return PROCESS.get_sample_value("jobfeed_webhook_deliveries_total", {"outcome": outcome}) or 0.0


async def test_a_final_job_is_posted_signed_and_retried_with_the_same_id(dsn, queue, pool, demo_kind,
                                                                         webhook_worker):
    before = {o: deliveries(o) for o in ("delivered", "retried", "failed")}
    async with Receiver(statuses=(500, 503, 204)) as receiver:
        async with serve(dsn, webhook_hosts=("127.0.0.1",)) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
                sub = (await http.post("/api/jobs", json={"kind": "demo", "target": "hooked",
                                                          "notify_url": receiver.url})).json()
                other = (await http.post("/api/jobs", json={"kind": "demo", "target": "hooked"})).json()
                assert other["id"] == sub["id"]
                (job,) = await queue.claim(["demo"], 1, "w")
                assert await queue.complete(job.id, job.generation, {"steps": 3})

        async def delivered():
            return len(receiver.got) >= 3
        await eventually(delivered, timeout=15, interval=0.05, what="three delivery attempts")
        await asyncio.sleep(0.3)
        assert len(receiver.got) == 3  # taken on the third: no more
    ids = {h["webhook-id"] for h, _ in receiver.got}
    assert len(ids) == 1  # the same id on every retry: receivers can drop repeats
    headers, body = receiver.got[-1]
    view = Webhook(SECRET).verify(body, headers)  # the reference library accepts the signature
    assert (view["id"], view["status"], view["result"]) == (sub["id"], "completed", {"steps": 3})
    assert view == await queue.get_job(sub["id"])  # the final public view, as GET answers it
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + base64.b64encode(b"another secret of 32 bytes!!!!!").decode()).verify(body, headers)
    # one delivery for the one request that asked (the other had no notify_url)
    rows = await pool.fetch("select state, attempts from jobfeed.jobs where kind = 'jobfeed.webhook'")
    assert [tuple(d) for d in rows] == [("completed", 3)]
    # each attempt counted by its outcome
    assert {o: deliveries(o) - before[o] for o in before} == {"delivered": 1, "retried": 2, "failed": 0}


async def test_a_delivery_refused_for_good_is_counted_failed(dsn, queue, pool, demo_kind, webhook_worker):
    before = {o: deliveries(o) for o in ("delivered", "retried", "failed")}
    async with Receiver(statuses=(410,)) as receiver:
        await queue.submit("demo", "gone", request=True, notify_url=receiver.url)
        (job,) = await queue.claim(["demo"], 1, "w")
        assert await queue.complete(job.id, job.generation, {})

        async def final():
            return await pool.fetchval("select state::text from jobfeed.jobs where kind = 'jobfeed.webhook' "
                                       "and state = 'failed'")
        await eventually(final, timeout=15, what="the delivery failed")
    assert len(receiver.got) == 1  # 410: not tried again
    assert {o: deliveries(o) - before[o] for o in before} == {"delivered": 0, "retried": 0, "failed": 1}


async def a_delivery(queue, pool, receiver, target="hook"):
    """Submit a job that asks `receiver` to be told, complete it, and wait for
    its delivery's first attempt to end: (state, attempts, last_error's code, run_after - now)."""
    await queue.submit("demo", target, request=True, notify_url=receiver.url)
    (job,) = await queue.claim(["demo"], 1, "w")
    assert await queue.complete(job.id, job.generation, {})

    async def ended():
        return await pool.fetchrow("select state::text, attempts, last_error_code as code, "
                                   "extract(epoch from run_after - now()) as wait from jobfeed.jobs "
                                   "where kind = 'jobfeed.webhook' and state in ('queued', 'completed', 'failed') "
                                   "and attempts > 0")
    return await eventually(ended, timeout=15, what="the delivery's first attempt")


@pytest.mark.parametrize("status", [401, 403, 302, 307])
async def test_only_a_2xx_delivers_and_credentials_or_redirects_fail_for_good(dsn, queue, pool, demo_kind,
                                                                              webhook_worker, status):
    """A receiver's 401/403 is not the handlers' release (asked again for ever,
    at once with Retry-After: 0), and a redirect, not followed, delivered nothing."""
    before = {o: deliveries(o) for o in ("delivered", "failed")}
    async with Receiver(statuses=(status,), headers="Retry-After: 0\r\nLocation: http://127.0.0.1:9/x\r\n") as r:
        row = await a_delivery(queue, pool, r)
        await asyncio.sleep(0.5)
        assert len(r.got) == 1
    assert (row["state"], row["attempts"], row["code"]) == ("failed", 1, f"http_{status}")
    assert {o: deliveries(o) - before[o] for o in before} == {"delivered": 0, "failed": 1}


async def test_a_retry_after_waits_at_most_the_longest_backoff(dsn, queue, pool, demo_kind, webhook_worker):
    async with Receiver(statuses=(429,), headers="Retry-After: 99999999\r\n") as r:
        row = await a_delivery(queue, pool, r)
    assert (row["state"], row["code"]) == ("queued", "http_429")
    assert 3600 - 10 < row["wait"] <= 3600  # not the 3 years it asked for


async def test_the_answer_body_is_never_read(dsn, queue, pool, demo_kind, webhook_worker):
    """A 200 that says a gigabyte follows and sends none: delivered once the
    status line is in, not after a read's timeout (nor with the body in memory)."""
    async def promise_a_gigabyte(status, writer):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000000000\r\n\r\n")
        await writer.drain()
        while not writer.is_closing():
            await asyncio.sleep(0.1)
    async with Receiver(then=promise_a_gigabyte) as r:
        row = await a_delivery(queue, pool, r)
    assert (row["state"], row["attempts"]) == ("completed", 1)


async def test_an_attempt_ends_at_its_deadline_however_the_answer_trickles(dsn, queue, pool, demo_kind,
                                                                          webhook_worker, monkeypatch):
    """A header byte every 0.2 s passes every read's timeout; the attempt's own
    deadline ends it, a transient `timeout`."""
    from jobfeed.worker import webhooks
    monkeypatch.setattr(webhooks, "DEADLINE", 1)

    async def trickle(status, writer):
        writer.write(b"HTTP/1.1 200 OK\r\n")
        while not writer.is_closing():
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.2)
    async with Receiver(then=trickle) as r:
        row = await a_delivery(queue, pool, r)
    assert (row["state"], row["attempts"], row["code"]) == ("queued", 1, "timeout")


async def test_a_submission_answered_with_a_reused_final_job_is_notified_too(dsn, queue, pool, demo_kind,
                                                                              webhook_worker):
    await queue.set_kind_request_policy("demo", reuse_for=600)
    async with Receiver() as receiver:
        async with serve(dsn, webhook_hosts=("127.0.0.1",)) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
                first = (await http.post("/api/jobs", json={"kind": "demo", "target": "again"})).json()
                (job,) = await queue.claim(["demo"], 1, "w")
                assert await queue.complete(job.id, job.generation, {"steps": 2})
                # alone, and several at once (the group commit's batch)
                answers = await asyncio.gather(*(http.post("/api/jobs", json={
                    "kind": "demo", "target": "again", "notify_url": f"{receiver.url}?n={n}"}) for n in range(5)))
                assert {(a.status_code, a.json()["reused"], a.json()["id"]) for a in answers} == \
                    {(200, True, first["id"])}
            py = await queue.submit("demo", "again", notify_url=receiver.url + "?py")
            assert py.reused

            async def delivered():
                return len(receiver.got) >= 6
            await eventually(delivered, timeout=15, interval=0.05, what="six deliveries")
    views = [Webhook(SECRET).verify(body, headers) for headers, body in receiver.got]
    assert {(v["id"], v["status"], json.dumps(v["result"])) for v in views} == \
        {(first["id"], "completed", '{"steps": 2}')}
    assert len({h["webhook-id"] for h, _ in receiver.got}) == 6  # one per request
    assert await pool.fetchval(f"select count(*) from {ATTEMPTS} a join jobfeed.jobs j on j.id = a.job_id "
                               "where j.kind = 'demo'") == 1  # reused: the job did not run again


async def test_a_request_that_left_is_not_notified(dsn, queue, pool, demo_kind, webhook_env):
    s = await queue.submit("demo", "left-hook", request=True, notify_url="http://127.0.0.1:9/x")
    keep = await queue.submit("demo", "left-hook", request=True)
    await queue.leave(s.request_id)
    await queue.leave(keep.request_id)  # canceled: final, but nobody asked to hear about it any more
    assert await pool.fetchval("select count(*) from jobfeed.jobs where kind = 'jobfeed.webhook'") == 0


@pytest.mark.parametrize("url", ["http://evil.example/x", "ftp://127.0.0.1/x", "not a url", 5,
                                 "http://127.0.0.1.evil.example/x", "http://user@evil.example/",
                                 "http://user:secret@127.0.0.1/x", "http://127.0.0.1:99999/x",
                                 "http://127.0.0.1/a\r\nX-Injected: 1", "http://127.0.0.1/a b",
                                 "http://127.0.0.1/a\tb"])  # no request line carries these
async def test_notify_url_hosts_are_allowed_by_name(dsn, pool, url):
    async with serve(dsn, webhook_hosts=("127.0.0.1",)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            r = await http.post("/api/jobs", json={"kind": "demo", "target": "t", "notify_url": url})
            assert r.status_code == 422 and r.json()["error"]["code"] == "notify_url_not_allowed"
            ok = await http.post("/api/jobs", json={"kind": "demo", "target": "t",
                                                    "notify_url": "http://127.0.0.1:8123/hook"})
            assert ok.status_code == 201
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 1


async def test_without_allowed_hosts_every_notify_url_is_refused(dsn, pool):
    async with serve(dsn) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            r = await http.post("/api/jobs", json={"kind": "demo", "target": "t",
                                                   "notify_url": "http://127.0.0.1/hook"})
            assert r.status_code == 422 and r.json()["error"]["code"] == "notify_url_not_allowed"
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 0


async def test_no_one_but_the_database_makes_a_delivery(dsn, queue, pool, demo_kind):
    """A delivery submitted over HTTP was taken: a worker with the secret would
    sign a body of the sender's choosing to an allowed host; and a duplicate
    of a real one (its target is a request id) answered that delivery's id."""
    async with serve(dsn, webhook_hosts=("127.0.0.1",)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            sub = (await http.post("/api/jobs", json={"kind": "demo", "target": "hooked",
                                                      "notify_url": "http://127.0.0.1:9/hook/s3cret"})).json()
            (job,) = await queue.claim(["demo"], 1, "w")
            assert await queue.complete(job.id, job.generation, {"steps": 3})
            (delivery,) = await pool.fetch("select id, target from jobfeed.jobs where kind = 'jobfeed.webhook'")
            assert delivery["target"] == sub["request_id"]
            forged = {"url": "http://127.0.0.1:9/hook", "webhook_id": "msg_x", "job_id": sub["id"],
                      "body": {"id": sub["id"], "status": "completed", "result": {"paid": True}}}
            for body in ({"kind": "jobfeed.webhook", "target": "forged", "payload": forged},
                         {"kind": "jobfeed.webhook", "target": sub["request_id"]}):
                r = await http.post("/api/jobs", json=body)
                assert (r.status_code, r.json()["error"]["code"]) == (422, "unknown_kind"), r.text
    with pytest.raises(QueueError) as refused:
        await queue.submit("jobfeed.webhook", "forged", forged)
    assert refused.value.code == "unknown_kind"
    assert await pool.fetchval("select count(*) from jobfeed.jobs where kind = 'jobfeed.webhook'") == 1
    assert await pool.fetchval("select count(*) from jobfeed.requests where job_id = $1", delivery["id"]) == 0


async def test_a_notify_url_refused_says_why(dsn):
    async with serve(dsn, webhook_hosts=("127.0.0.1",)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            for url, why in ((5, "must be a string"), ({}, "must be a string"),
                             ("http://127.0.0.1/" + "a" * 2100, "at most 2048 characters")):
                r = await http.post("/api/jobs", json={"kind": "demo", "target": "t", "notify_url": url})
                assert (r.status_code, r.json()["error"]["code"]) == (422, "notify_url_not_allowed")
                assert why in r.json()["error"]["message"]


@pytest.mark.parametrize("url, hosts, allowed", [
    ("http://localhost./x", ("localhost",), True),  # a trailing dot names the same host
    ("http://LOCALHOST/x", ("localhost",), True),
    ("http://[0:0:0:0:0:0:0:1]:8080/x", ("::1",), True),  # one address, however written
    ("http://bücher.example/x", ("xn--bcher-kva.example",), True),  # an international name, as punycode
    ("http://xn--bcher-kva.example/x", ("xn--bcher-kva.example",), True),
    ("http://2130706433/x", ("127.0.0.1",), False),  # 127.0.0.1 to a resolver, not to the list
    ("http://0x7f000001/x", ("127.0.0.1",), False),
    ("http://127.1/x", ("127.0.0.1",), False),
    ("http://127.0.0.1:0/x", ("127.0.0.1",), False),  # no one listens on port 0
])
def test_hosts_compare_in_one_form(url, hosts, allowed):
    assert host_allowed(url, hosts) is allowed


def test_webhook_settings(caplog):
    s = Settings.from_env({"JOBFEED_WEBHOOK_HOSTS": "Hooks.Example, 127.0.0.1, LOCALHOST., bücher.example, "
                           "0:0:0:0:0:0:0:1", "JOBFEED_WEBHOOK_SECRET": SECRET})
    assert s.webhook_hosts == ("hooks.example", "127.0.0.1", "localhost", "xn--bcher-kva.example", "::1")
    assert s.webhook_secret == SECRET
    for bad in ("2130706433", "0x7f000001", "0177.0.0.1", "a..b", "[::1]"):
        with pytest.raises(SettingError) as e:
            Settings.from_env({"JOBFEED_WEBHOOK_HOSTS": bad})
        assert "JOBFEED_WEBHOOK_HOSTS" in str(e.value)
    # a worker that would run deliveries but cannot sign them says so once, at start
    warn_unsigned_webhooks(s)
    assert not caplog.records
    warn_unsigned_webhooks(dataclasses.replace(s, webhook_secret=None))
    (record,) = caplog.records
    assert record.levelname == "WARNING" and "JOBFEED_WEBHOOK_SECRET is not" in record.message
    for bad in ("secret", "whsec_c2hvcnQ=", "whsec_!!!"):
        with pytest.raises(SettingError) as e:
            Settings.from_env({"JOBFEED_WEBHOOK_SECRET": bad})
        assert "JOBFEED_WEBHOOK_SECRET" in str(e.value)
    assert json.dumps(s.webhook_hosts)
