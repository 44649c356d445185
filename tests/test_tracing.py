"""OpenTelemetry (jobfeed[otel]) with the SDK's in-memory exporter: one trace
holds the HTTP submit, the SQL submit and every run of the job it caused,
retries included (each run a child of the stored traceparent, linking to it),
with claims and outcomes; without the package nothing of it is imported."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from jobfeed.api.app import create_app  # noqa: E402
from jobfeed.worker import tracing  # noqa: E402
from jobfeed.worker.runner import Runner  # noqa: E402
from jobfeed.worker.tasks import TaskSpec, Transient  # noqa: E402
from servers import asgi_client, make_settings  # noqa: E402
from waiting import wait_state  # noqa: E402

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # once per process; later calls are ignored with a warning
    tracing._next_look = 0.0  # an earlier test's "no provider" may be kept for a second
    return exporter


async def test_one_trace_spans_the_submit_and_its_retried_runs(dsn, queue, pool, exporter):
    exporter.clear()

    async def flaky(job, ctx):
        if job.generation == 1:
            raise Transient("upstream_down", "try again")
        return {"ok": True}

    spec = TaskSpec("flaky", flaky, max_attempts=3, lease=5.0, backoff=(0.05,), jitter=0.0)
    await queue.register_kind("flaky", max_attempts=3, lease=5.0, backoff=(0.05,), jitter=0.0)
    async with asgi_client(create_app(make_settings(dsn))) as client:
        answer = await client.post("/api/jobs", json={"kind": "flaky", "target": "t"},
                                   headers={"traceparent": CALLER})
        assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]
    runner = Runner(queue, dsn, [spec], poll_interval=0.1, grace=1.0)
    task = asyncio.create_task(runner.run())
    try:
        await wait_state(pool, job_id, "completed")
    finally:
        runner.stop()
        await asyncio.wait_for(task, 10)

    spans = exporter.get_finished_spans()
    by_name: dict[str, list] = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    [http] = by_name["POST /api/jobs"]
    [sql] = by_name["jobfeed submit"]
    runs = sorted(by_name["jobfeed run flaky"], key=lambda s: s.attributes["jobfeed.generation"])
    # the request continues the caller's trace; the SQL submit is its child
    assert format(http.context.trace_id, "032x") == TRACE_ID and http.kind == trace.SpanKind.SERVER
    assert sql.parent.span_id == http.context.span_id
    # both runs, the retry included, are in that trace under the request, and link to it
    assert [(r.attributes["jobfeed.attempt"], r.attributes["jobfeed.generation"]) for r in runs] == [(1, 1), (2, 2)]
    assert [r.attributes["jobfeed.outcome"] for r in runs] == ["retried", "completed"]
    assert runs[0].attributes["jobfeed.code"] == "upstream_down"
    for run in runs:
        assert run.context.trace_id == http.context.trace_id
        assert run.parent.span_id == http.context.span_id
        assert [link.context.span_id for link in run.links] == [http.context.span_id]
    # each run's outcome is a child of the run; claims are spans of their own
    outcomes = by_name["jobfeed outcome"]
    assert sorted(o.attributes["jobfeed.outcome"] for o in outcomes if o.context.trace_id == http.context.trace_id) \
        == ["completed", "retried"]
    assert any(c.attributes.get("jobfeed.claimed") == 1 for c in by_name["jobfeed claim"])
    stored = await pool.fetchval("select traceparent from jobfeed.jobs where id = $1::uuid", job_id)
    assert stored == f"00-{TRACE_ID}-{format(http.context.span_id, '016x')}-01"


async def test_a_traced_job_is_never_seen_without_its_trace_context(dsn, queue, pool, exporter):
    """Before: the trace context was stored by a statement after the submit's
    commit, and a worker claiming the job at once (most, when idle) ran its
    first attempt in a trace of its own. A poller stands in for the claimer."""
    await queue.register_kind("traced", max_attempts=3, lease=5.0, backoff=(1.0,))
    seen: dict[str, str | None] = {}
    done = asyncio.Event()

    async def poll():
        async with pool.acquire() as conn:
            while not done.is_set():
                for row in await conn.fetch("select target, traceparent from jobfeed.jobs where kind = 'traced'"):
                    seen.setdefault(row["target"], row["traceparent"])

    poller = asyncio.create_task(poll())
    try:
        async with asgi_client(create_app(make_settings(dsn))) as client:
            for n in range(20):
                answer = await client.post("/api/jobs", json={"kind": "traced", "target": f"t{n}"},
                                           headers={"traceparent": CALLER})
                assert answer.status_code == 201, answer.text
    finally:
        done.set()
        await poller
    assert len(seen) == 20 and all(TRACE_ID in (tp or "") for tp in seen.values()), seen


def test_without_the_package_nothing_of_it_is_imported():
    code = """
import sys
sys.modules["opentelemetry"] = None  # as if jobfeed[otel] were not installed
import jobfeed.api.app, jobfeed.worker.runner, jobfeed.worker.logs, logging
from jobfeed.worker import tracing
assert not tracing.INSTALLED and not tracing.active()
with tracing.span("x", parent="00-" + "1" * 32 + "-" + "2" * 16 + "-01"):
    assert tracing.current_traceparent() is None and tracing.trace_id() is None
jobfeed.worker.logs.JsonFormatter().format(logging.LogRecord("t", 20, "f", 1, "m", (), None))
print(sorted(m for m, v in sys.modules.items() if m.startswith("opentelemetry") and v is not None))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_installed_without_a_tracer_provider_records_nothing_until_one_is_set():
    # A worker with the package but no SDK set up pays for no spans (no claim-time read
    # before starting jobs, no context managers per job); one set later is picked up.
    code = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from jobfeed.worker import tracing
assert tracing.INSTALLED and not tracing.active()
with tracing.span("x") as nothing:
    assert nothing is None and tracing.current_traceparent() is None
trace.set_tracer_provider(TracerProvider())
tracing._next_look = 0.0  # the next look, at most RECHECK seconds later in a real process
assert tracing.active()
with tracing.span("x") as current:
    assert current.get_span_context().is_valid and tracing.current_traceparent() is not None
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
