"""Prometheus metrics of the work done in this process: what workers run and the
sweeper removes. One registry per process (PROCESS); the API adds its own per
app (api/metrics.py) and shows both, so `jobfeed up`, one process, shows
everything at the API's /metrics. Standalone workers and sweepers serve
PROCESS on JOBFEED_METRICS_PORT (serve_metrics). What the runner updates for
every job is kept in worker/tallies.py's cheaper counters and histograms.

Names follow Prometheus style with the unit in the name. Labels are kinds,
outcomes and error codes: sets the operator controls, never job ids or targets."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time

from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, CollectorRegistry, Counter, ProcessCollector, generate_latest

from . import tallies

log = logging.getLogger("jobfeed.metrics")

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # what every Prometheus version reads

PROCESS = CollectorRegistry()
ProcessCollector(registry=PROCESS)

# Job durations reach from milliseconds to hours.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800,
                    3600, 7200, 21600, float("inf"))

# Outcomes of one attempt, as the `outcome` label says them.
COMPLETED, FAILED, RETRIED, RELEASED, LOST, ABANDONED = (
    "completed", "failed", "retried", "released", "lost", "abandoned")
FINAL = (COMPLETED, FAILED)
WAITING = "waiting"  # the handler returned ctx.wait_for: it runs again later

RUN = tallies.Histogram("jobfeed_job_run_seconds", "Handler run time of one attempt, by kind and outcome.",
                        ["kind", "outcome"], buckets=DURATION_BUCKETS, registry=PROCESS)
WAIT = tallies.Histogram("jobfeed_job_wait_seconds", "Time from a job being due to a worker claiming it.",
                         ["kind"], buckets=DURATION_BUCKETS, registry=PROCESS)
END_TO_END = tallies.Histogram("jobfeed_job_end_to_end_seconds", "Time from submission to the final outcome.",
                               ["kind", "outcome"], buckets=DURATION_BUCKETS, registry=PROCESS)
OUTCOMES = tallies.Counter("jobfeed_job_outcomes_total", "Attempts ended, by kind, outcome and error code.",
                           ["kind", "outcome", "code"], registry=PROCESS)
CLAIMS = tallies.Counter("jobfeed_job_claims_total", "Jobs claimed by this process.", ["kind"], registry=PROCESS)
RETRIES = tallies.Counter("jobfeed_job_retries_total", "Attempts that failed and will be retried.", ["kind"],
                          registry=PROCESS)
RELEASES = tallies.Counter("jobfeed_job_releases_total", "Jobs handed back without using an attempt.", ["kind"],
                           registry=PROCESS)
LEASE_LOSSES = tallies.Counter("jobfeed_lease_losses_total", "Attempts whose lease was lost while they ran.", ["kind"],
                               registry=PROCESS)
RUNNING = tallies.Gauge("jobfeed_running_jobs", "Handlers running in this process.", ["kind"], registry=PROCESS)
SWEPT = Counter("jobfeed_sweeper_jobs_total", "Jobs the sweeper failed (lease expired, no attempts left) "
                "or deleted (past retention).", ["action"], registry=PROCESS)
LEAVES = Counter("jobfeed_sweeper_leaves_total", "Deferred leaves (a closed job page's) the sweeper applied.",
                 registry=PROCESS)
WEBHOOKS = Counter("jobfeed_webhook_deliveries_total", "Webhook deliveries by outcome.", ["outcome"],
                   registry=PROCESS)


def attempt_ended(kind: str, outcome: str, code: str, seconds: float) -> None:
    """One attempt's handler ended with `outcome` after `seconds`."""
    RUN.labels(kind, outcome).observe(seconds)
    OUTCOMES.labels(kind, outcome, code).inc()
    if outcome == RETRIED:
        RETRIES.labels(kind).inc()
    elif outcome == RELEASED:
        RELEASES.labels(kind).inc()
    elif outcome == LOST:
        LEASE_LOSSES.labels(kind).inc()


class Ages:
    """End-to-end times without trusting the worker's clock: each claim says,
    by the database's clock, how long ago each job was submitted (its age) and
    how long it waited once due."""

    def __init__(self) -> None:
        # (job id, generation) -> monotonic time of submission: per attempt, so an
        # attempt that ends after this worker claimed the job again (its lease
        # ran out meanwhile) takes nothing of the new attempt's
        self._born: dict[tuple[object, int], float] = {}

    def claimed(self, times) -> None:
        """times: the ClaimTimes (worker/queue_records.py) of the jobs just claimed."""
        now = time.monotonic()
        for t in times:
            if t.wait is not None:
                WAIT.labels(t.kind).observe(max(t.wait, 0.0))
            self._born[t.id, t.generation] = now - (t.age or 0.0)

    def ended(self, job_id, generation: int, kind: str, outcome: str) -> None:
        """An attempt ended; only a final outcome (FINAL) is observed."""
        born = self._born.pop((job_id, generation), None)
        if born is not None and outcome in FINAL:
            END_TO_END.labels(kind, outcome).observe(max(time.monotonic() - born, 0.0))


def render(*registries: CollectorRegistry) -> bytes:
    return b"".join(generate_latest(r) for r in registries)


def loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:  # not an address (a unix socket, a test transport's name)
        return False


def metrics_app(token: str | None):
    """A Starlette app with /metrics alone, for workers and sweepers, under the
    API's rule: JOBFEED_METRICS_TOKEN as a bearer token when set, else loopback
    clients only."""
    import hmac

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def metrics(request: Request) -> Response:
        if token is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return JSONResponse({"error": {"code": "unauthorized", "message": "a valid metrics token is required"}},
                                    status_code=401, headers={"WWW-Authenticate": 'Bearer realm="jobfeed-metrics"'})
        elif not loopback(request.client.host if request.client else None):
            return JSONResponse({"error": {"code": "forbidden", "message": "metrics answer loopback clients only "
                                           "unless JOBFEED_METRICS_TOKEN is set"}}, status_code=403)
        return Response(render(PROCESS), media_type=CONTENT_TYPE)

    # another path or method: the contract's JSON error, as the API answers it
    from starlette.exceptions import HTTPException

    from jobfeed.api.errors import EXCEPTION_HANDLERS
    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])],
                     exception_handlers={HTTPException: EXCEPTION_HANDLERS[HTTPException]})


class MetricsServer:
    """/metrics on its own port in the process's event loop (uvicorn), for a
    standalone worker or sweeper; stop() ends serve()."""

    def __init__(self, host: str, port: int, token: str | None):
        import contextlib

        import uvicorn

        class Server(uvicorn.Server):
            def capture_signals(self):  # the process's own handlers call stop()
                return contextlib.nullcontext()

        self.server = Server(uvicorn.Config(metrics_app(token), host=host, port=port, log_level="warning",
                                            lifespan="off", access_log=False, log_config=None))

    async def serve(self) -> None:
        config = self.server.config
        announce = asyncio.create_task(self._announce())  # once listening, not before: the port may be taken
        try:
            await self.server.serve()
        except SystemExit:  # uvicorn exits when it cannot bind; it has logged why
            log.error("metrics could not listen on %s:%d; the process runs on without them", config.host, config.port)
            raise OSError(f"metrics could not listen on {config.host}:{config.port}") from None
        finally:
            announce.cancel()

    async def _announce(self) -> None:
        while not self.server.started:
            await asyncio.sleep(0.05)
        log.info("metrics on http://%s:%d/metrics", self.server.config.host, self.server.config.port)

    def stop(self) -> None:
        self.server.should_exit = True
