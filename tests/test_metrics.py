"""Prometheus metrics: `jobfeed up` shows the API's, the worker's and the
sweeper's at the API's /metrics and its histograms move as jobs run; a
standalone worker serves its own on JOBFEED_METRICS_PORT under the same access
rule (a token when set, else loopback only)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sys

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import JOBFEED, worker_env
from jobfeed.worker import metrics
from servers import ROOT, Process, free_port
from waiting import eventually

ADMIN_TOKEN = "an-admin-token-for-metrics"


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels): value}, parsed by prometheus-client's own parser
    (so the exposition is also checked to be well-formed)."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, frozenset(s.labels.items()))] = s.value
    return found


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def total(found: dict, name: str, **labels: str) -> float:
    """Summed over the labels not given."""
    want = set(labels.items())
    return sum(v for (n, ls), v in found.items() if n == name and want <= ls)


async def finish(client: httpx.AsyncClient, location: str) -> dict:
    async def final():
        view = (await client.get(location)).json()
        return view if view["status"] in ("completed", "failed") else None
    return await eventually(final, what=f"{location} to finish")


@pytest.mark.full
async def test_up_serves_every_part_and_the_histograms_move(dsn):
    port = free_port()
    env = worker_env(dsn, JOBFEED_PORT=str(port), JOBFEED_ADMIN_TOKEN=ADMIN_TOKEN)
    env.pop("JOBFEED_TASKS")  # up brings the demo kind itself
    proc = await Process(JOBFEED + ["up", "--grace", "1s"], env).start(ready=r"jobfeed is up: (http://\S+/)")
    try:
        async with httpx.AsyncClient(base_url=proc.match.group(1), timeout=10) as client:
            before = samples((await client.get("/metrics")).text)
            # "ok" runs long enough (1.5 s) for its stream, opened after the
            # dashboard has read its changes, to see one more change on a busy machine
            jobs = {"ok": {"steps": 3, "step_ms": 500}, "retried": {"fail": ["transient"], "step_ms": 20},
                    "failed": {"fail": ["permanent"]}}
            locations = {}
            admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
            async with client.stream("GET", "/api/admin/events", headers=admin) as dashboard:
                events = dashboard.aiter_lines()
                async for line in events:
                    if line == "event: ready":
                        break
                for target, payload in jobs.items():
                    answer = await client.post("/api/jobs", json={"kind": "demo", "target": target,
                                                                  "payload": payload})
                    assert answer.status_code == 201, answer.text
                    locations[target] = answer.headers["location"]
                # The dashboard's stream measures its lag too, for a view whose
                # updated_at dates its change: a job's first view here is not
                # timed (what it changed, and when, is unknown), nor is a change
                # that leaves updated_at (a retry's failure or claim), which may
                # come second when the machine is busy.
                updated: dict[str, str] = {}
                async for line in events:
                    if line.startswith("data:"):
                        view = json.loads(line[5:])
                        job_id = view.get("id")  # the ready event's is {}
                        if job_id is None:
                            continue
                        if updated.get(job_id, view["updated_at"]) != view["updated_at"]:
                            break
                        updated[job_id] = view["updated_at"]
            # A stream open while the job runs: its events measure the SSE lag.
            async with client.stream("GET", locations["ok"] + "/events") as stream:
                async for line in stream.aiter_lines():
                    if '"status":"completed"' in line.replace(" ", ""):
                        break
            finals = {t: (await finish(client, loc))["status"] for t, loc in locations.items()}
            assert finals == {"ok": "completed", "retried": "completed", "failed": "failed"}

            async def moved():
                after = samples((await client.get("/metrics")).text)
                run = "jobfeed_job_run_seconds_count"
                if value(after, run, kind="demo", outcome="completed") - \
                        value(before, run, kind="demo", outcome="completed") < 2:
                    return None
                # wait and end-to-end times are observed once the read after each claim
                # answers, which may be after the job ended
                if total(after, "jobfeed_job_wait_seconds_count", kind="demo") - \
                        total(before, "jobfeed_job_wait_seconds_count", kind="demo") < 4:
                    return None
                # jobs by state come from the stats snapshot: a few seconds old at most
                return after if value(after, "jobfeed_jobs", kind="demo", state="completed") == 2 else None
            after = await eventually(moved, what="the completions to be counted")

        def grew(name: str, by: float = 1, **labels: str) -> None:
            assert total(after, name, **labels) - total(before, name, **labels) >= by, (name, labels)

        grew("jobfeed_job_run_seconds_count", 2, kind="demo", outcome="completed")
        grew("jobfeed_job_run_seconds_count", 1, kind="demo", outcome="retried")
        grew("jobfeed_job_run_seconds_count", 1, kind="demo", outcome="failed")
        grew("jobfeed_job_outcomes_total", 1, kind="demo", outcome="retried", code="demo_transient")
        grew("jobfeed_job_outcomes_total", 1, kind="demo", outcome="failed", code="demo_permanent")
        grew("jobfeed_job_retries_total", 1, kind="demo")
        grew("jobfeed_job_wait_seconds_count", 4, kind="demo")  # one per claim: 3 jobs, one of them twice
        grew("jobfeed_job_end_to_end_seconds_count", 2, kind="demo", outcome="completed")
        grew("jobfeed_job_end_to_end_seconds_count", 1, kind="demo", outcome="failed")
        grew("jobfeed_submit_seconds_count", 3, kind="demo")
        grew("jobfeed_sse_lag_seconds_count", 1, stream="job")
        grew("jobfeed_sse_lag_seconds_count", 1, stream="admin")
        grew("jobfeed_http_requests_total", 3, method="POST", route="/api/jobs", status="201")
        # the run time is the handler's: 3 steps of 500 ms
        assert total(after, "jobfeed_job_run_seconds_sum", kind="demo", outcome="completed") >= 1.5
        assert value(after, "jobfeed_jobs", kind="demo", state="failed") == 1
        assert value(after, "jobfeed_running_jobs", kind="demo") == 0
        assert ("jobfeed_sweeper_jobs_total", frozenset({("action", "deleted")})) in after
        assert ("process_cpu_seconds_total", frozenset()) in after
    finally:
        assert await proc.stop(timeout=15) == 0, proc.log


def test_a_scrape_skips_a_metrics_file_not_yet_written(tmp_path, monkeypatch):
    """In multiprocess mode prometheus-client creates a process's file empty
    and sizes it a moment later: a scrape in between (a process starting), or
    after a process was killed in between, still answers with every other
    process's figures."""
    from prometheus_client.mmap_dict import MmapedDict, mmap_key

    from jobfeed.api.metrics import Metrics
    other = MmapedDict(str(tmp_path / "counter_4242.db"))  # another process's counter
    other.write_value(mmap_key("jobfeed_http_requests", "jobfeed_http_requests_total",
                               ["method", "route", "status"], ["GET", "/api/kinds", "200"], "HTTP requests."), 7.0, 0.0)
    other.close()
    (tmp_path / "counter_4343.db").write_bytes(b"")  # created, not yet sized
    (tmp_path / "gauge_livesum_4343.db").write_bytes(b"")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    found = samples(Metrics().render({}, [], None, None).decode())
    assert value(found, "jobfeed_http_requests_total", method="GET", route="/api/kinds", status="200") == 7


async def api_processes(dsn: str, port: int) -> Process:
    """`jobfeed api --workers 2 --port port`, its metrics in a directory of the
    command's own. A bad JOBFEED_PORT beside the flag: the flag replaces it, in
    the processes too (they build the app from the environment)."""
    env = worker_env(dsn, JOBFEED_PORT="not-a-port", JOBFEED_ADMIN_TOKEN=ADMIN_TOKEN)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return await Process(JOBFEED + ["api", "--workers", "2", "--port", str(port)], env).start(
        ready=r"Uvicorn running", timeout=60)


async def scrape(url: str) -> dict:
    # a connection of its own each time, so scrapes spread over the processes
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        return samples((await client.get("/metrics")).text)


def api_pids(found: dict) -> set[int]:
    return {int(dict(ls)["pid"]) for (n, ls) in found if n == "jobfeed_api_process_start_time_seconds"}


async def two_api_pids(url: str) -> set[int] | None:
    """The two processes' pids once one scrape shows both, else None."""
    try:
        found = api_pids(await scrape(url))
    except httpx.TransportError:  # (a process may still be starting)
        return None
    return found if len(found) == 2 else None


@pytest.mark.full
async def test_api_processes_answer_metrics_for_all_of_them(dsn):
    """`jobfeed api --workers 2`: whichever process a scrape reaches, it shows
    both processes (one start-time series per pid) and every request either
    of them counted."""
    port = free_port()
    proc = await api_processes(dsn, port)
    url = f"http://127.0.0.1:{port}"
    try:
        await eventually(lambda: two_api_pids(url), timeout=30, what="both API processes in one scrape")
        for _ in range(20):
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                assert (await client.get("/api/kinds")).status_code == 200
        for _ in range(6):
            found = await scrape(url)
            assert len(api_pids(found)) == 2
            assert total(found, "jobfeed_http_requests_total", method="GET", route="/api/kinds") == 20
            # a process's own counters name it: unlabelled, the processes' counts taking turns
            # from scrape to scrape read as counter resets
            own = [dict(ls).get("pid") for (n, ls) in found
                   if n in ("jobfeed_submit_statements_total", "jobfeed_feed_notifications_total")]
            assert len(own) == 2 and len(set(own)) == 1 and int(own[0]) in api_pids(found), own
    finally:
        assert await proc.stop(timeout=15) == 0, proc.log


@pytest.mark.full
async def test_a_killed_api_process_leaves_no_live_series(dsn):
    """`jobfeed api --workers 2`, one process killed while it holds open
    streams: uvicorn starts another, and the scrape shows the two running
    processes' start times and only their open streams, not the dead one's."""
    import psutil

    port = free_port()
    proc = await api_processes(dsn, port)
    url = f"http://127.0.0.1:{port}"

    def streams_held(pid: int) -> int:
        return sum(1 for c in psutil.Process(pid).net_connections(kind="tcp")
                   if c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED)

    try:
        first = await eventually(lambda: two_api_pids(url), timeout=30, what="both API processes in one scrape")
        async with contextlib.AsyncExitStack() as opened:
            async def open_stream() -> None:
                client = await opened.enter_async_context(httpx.AsyncClient(base_url=url, timeout=10))
                response = await opened.enter_async_context(client.stream(
                    "GET", "/api/admin/events", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}))
                assert response.status_code == 200
            for _ in range(40):  # a connection of its own each: the kernel spreads them
                await open_stream()
                if all(streams_held(pid) for pid in first):
                    break
            held = {pid: streams_held(pid) for pid in first}
            assert all(held.values()), held
            killed, kept = sorted(first)
            os.kill(killed, signal.SIGKILL)

            async def replaced() -> dict | None:
                try:
                    found = await scrape(url)
                except httpx.TransportError:
                    return None
                up = api_pids(found)
                return found if len(up) == 2 and kept in up and killed not in up else None
            found = await eventually(replaced, timeout=30, what="the killed process replaced in the scrape")
            assert value(found, "jobfeed_sse_streams", stream="admin") == held[kept]
    finally:
        assert await proc.stop(timeout=15) == 0, proc.log


@pytest.mark.full
async def test_a_taken_metrics_port_is_said_once_and_the_sweeper_runs_on(dsn):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = worker_env(dsn, JOBFEED_METRICS_PORT=str(taken.getsockname()[1]))
        proc = await Process(JOBFEED + ["sweeper"], env).start(ready=r"metrics could not listen", timeout=60)
        assert await proc.stop(timeout=15) == 0, proc.log
    # never announced as served: the port was someone else's
    assert not any("metrics on http://" in line for line in proc.output), proc.log


@pytest.mark.full
async def test_a_standalone_worker_serves_its_metrics_port(dsn, queue, demo_kind):
    port = free_port()
    # A lease long enough that a loaded machine never reclaims the job (one claim is asserted).
    env = worker_env(dsn, JOBFEED_METRICS_PORT=str(port), JOBFEED_LEASE="30s")
    proc = await Process(JOBFEED + ["worker", "--kinds", "demo", "--poll", "200ms"], env).start(
        ready=r"metrics on http://", timeout=60)
    try:
        job_id, _ = await queue.submit("demo", "standalone", {"steps": 1, "step_ms": 1})
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            async def counted():
                found = samples((await client.get("/metrics")).text)
                # the wait is observed once the read after the claim answers, which may
                # be after the job ended
                return found if value(found, "jobfeed_job_outcomes_total", kind="demo", outcome="completed",
                                      code="") >= 1 and value(found, "jobfeed_job_wait_seconds_count",
                                                              kind="demo") >= 1 else None
            found = await eventually(counted, what="the worker to count its completion and its wait")
        assert value(found, "jobfeed_job_claims_total", kind="demo") == 1
        assert value(found, "jobfeed_job_wait_seconds_count", kind="demo") == 1
        # the outcome is counted when the handler ends; its write to the database
        # is batched just after
        async def completed():
            return (await queue.get_job(job_id))["status"] == "completed" or None
        await eventually(completed, what="the completion to be written")
    finally:
        await proc.stop(timeout=15)


@pytest.mark.parametrize("token, client, headers, status", [
    (None, "127.0.0.1", {}, 200),
    (None, "10.1.2.3", {}, 403),
    ("a-metrics-token-123", "10.1.2.3", {}, 401),
    ("a-metrics-token-123", "10.1.2.3", {"Authorization": "Bearer wrong"}, 401),
    ("a-metrics-token-123", "10.1.2.3", {"Authorization": "Bearer a-metrics-token-123"}, 200),
])
async def test_the_metrics_port_answers_loopback_or_the_token(token, client, headers, status):
    transport = httpx.ASGITransport(app=metrics.metrics_app(token), client=(client, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://worker") as http:
        answer = await http.get("/metrics", headers=headers)
    assert answer.status_code == status
    if status == 200:
        assert "jobfeed_job_run_seconds" in answer.text


async def test_the_metrics_port_answers_other_paths_as_the_api_does():
    """From a black-box pass: a plain-text "Not Found"; errors everywhere are
    JSON in the contract's shape (README, Security)."""
    transport = httpx.ASGITransport(app=metrics.metrics_app(None), client=("127.0.0.1", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://worker") as http:
        for method, path, status, code in (("GET", "/", 404, "not_found"), ("GET", "/nope", 404, "not_found"),
                                           ("POST", "/metrics", 405, "method_not_allowed")):
            answer = await http.request(method, path)
            assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text


async def test_a_proxy_on_the_same_host_that_forwards_a_remote_client_gets_403(dsn, monkeypatch):
    """Without a metrics token, /metrics answers loopback clients; uvicorn
    trusts 127.0.0.1's X-Forwarded-For, so a local proxy passing on a remote
    client's address does not open the metrics to the world (README)."""
    from servers import serve

    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        assert (await http.get("/metrics")).status_code == 200
        assert (await http.get("/metrics", headers={"X-Forwarded-For": "127.0.0.1"})).status_code == 200
        answer = await http.get("/metrics", headers={"X-Forwarded-For": "203.0.113.5"})
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden"


def test_a_bad_metrics_port_is_refused_at_start():
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBFEED_")}
    env["JOBFEED_METRICS_PORT"] = "70000"
    import subprocess
    done = subprocess.run([sys.executable, "-m", "jobfeed.worker.cli", "sweeper", "--once"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "JOBFEED_METRICS_PORT" in done.stderr


def exposed_series(text: str) -> set[str]:
    """Every series name the exposition can have, from its TYPE lines (a labelled
    metric with no samples yet still has one): histograms' _bucket, _sum and
    _count, counters' _total."""
    names = set()
    suffixes = {"histogram": ("_bucket", "_sum", "_count"), "counter": ("_total",), "gauge": ("",),
                "summary": ("_sum", "_count", "")}
    for family in text_string_to_metric_families(text):
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
    return names


async def test_the_grafana_dashboard_queries_only_metrics_that_exist(dsn):
    from servers import asgi_client, make_settings

    from jobfeed.api.app import create_app

    dashboard = json.loads((ROOT / "examples" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 12
    queried = {name for e in exprs for name in re.findall(r"\b(jobfeed_[a-z_]+)\b", e)}
    async with asgi_client(create_app(make_settings(dsn))) as client:
        exposed = exposed_series((await client.get("/metrics")).text)
    assert queried - exposed == set()
    # and the contract's names are among them
    assert {"jobfeed_job_run_seconds_bucket", "jobfeed_job_wait_seconds_bucket", "jobfeed_submit_seconds_bucket",
            "jobfeed_job_end_to_end_seconds_bucket", "jobfeed_sse_lag_seconds_bucket", "jobfeed_jobs",
            "jobfeed_job_outcomes_total"} <= queried


async def test_paused_kinds_show_in_the_metrics(dsn, queue, demo_kind):
    from servers import asgi_client, make_settings

    from jobfeed.api.app import create_app

    async with asgi_client(create_app(make_settings(dsn))) as client:
        assert value(samples((await client.get("/metrics")).text), "jobfeed_kind_paused", kind="demo") == 0
        await queue.set_kind_paused("demo", True)
        assert value(samples((await client.get("/metrics")).text), "jobfeed_kind_paused", kind="demo") == 1


def test_tallies_expose_what_prometheus_client_would_for_the_same_updates():
    # The worker's per-job metrics are our own plain counters and histograms:
    # parsed back, they must say exactly what prometheus-client's would.
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    from jobfeed.worker import tallies

    buckets = (0.005, 0.1, 1, 60, float("inf"))
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    pairs = [
        (tallies.Histogram("h_seconds", "a histogram", ["kind"], buckets=buckets, registry=ours),
         Histogram("h_seconds", "a histogram", ["kind"], buckets=buckets, registry=theirs)),
        (tallies.Counter("c_total", "a counter", ["kind", "code"], registry=ours),
         Counter("c_total", "a counter", ["kind", "code"], registry=theirs)),
        (tallies.Gauge("g", "a gauge", ["kind"], registry=ours), Gauge("g", "a gauge", ["kind"], registry=theirs)),
    ]
    for h in (pairs[0][0], pairs[0][1]):
        for kind, seconds in (("a", 0.0), ("a", 0.005), ("a", 0.0051), ("b", 1.0), ("a", 59.9), ("a", 3600.0)):
            h.labels(kind).observe(seconds)
    for c in (pairs[1][0], pairs[1][1]):
        c.labels("a", "").inc()
        c.labels("a", "timeout").inc(2)
        c.labels("b", "").inc()
    for g in (pairs[2][0], pairs[2][1]):
        g.labels("a").inc()
        g.labels("a").inc()
        g.labels("a").dec()
        g.labels("b").inc()

    def without_created(registry):
        return {k: v for k, v in samples(generate_latest(registry).decode()).items() if not k[0].endswith("_created")}

    assert without_created(ours) == without_created(theirs)
    assert value(without_created(ours), "h_seconds_bucket", kind="a", le="0.005") == 2  # le is "<="
    with pytest.raises(ValueError):
        pairs[1][0].labels("only-one")
