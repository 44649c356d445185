"""The API's Prometheus metrics (prometheus-client), in a registry per app:
requests by route, submit latency, open streams and their delivery lag, the
feed's health, and jobs by kind and state from the stats query (a snapshot,
never a scan per scrape). /metrics shows them with the process's own
(jobfeed.worker.metrics.PROCESS): in `jobfeed up` that is the worker's and the
sweeper's too.

`jobfeed api --workers N` runs N processes behind one port, and a scrape
reaches one of them: there prometheus-client's multiprocess mode
(PROMETHEUS_MULTIPROC_DIR, set by the command) keeps every process's counters,
histograms and gauges in files, and any process answers with all of them
summed (open streams: over live processes). The figures read at scrape time
(_Live) come from the answering process: jobs by state are the database's
anyway; the feed's and the group commit's counters are that process's own,
labelled pid there (so each series only grows: unlabelled, two processes'
counts taking turns would read as counter resets)."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import re
import time
from typing import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobfeed.worker import metrics as process_metrics

# Submissions and stream deliveries take milliseconds, more under load.
FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf"))
STREAMS = ("job", "admin")


class _Live(Collector):
    """Figures read when scraped: the feed's counters, the batcher's, and the
    stats snapshot the scrape fetched."""

    def __init__(self) -> None:
        self.stats: dict = {}
        self.kinds: list[dict] = []
        self.feed = None
        self.batcher = None

    def collect(self):
        jobs = GaugeMetricFamily("jobfeed_jobs", "Jobs by kind and true state.", labels=["kind", "state"])
        for kind, states in sorted(self.stats.get("counts", {}).items()):
            for state, n in sorted(states.items()):
                jobs.add_metric([kind, state], n)
        yield jobs
        paused = GaugeMetricFamily("jobfeed_kind_paused", "1 while a kind is paused (nothing of it is claimed).",
                                   labels=["kind"])
        for k in self.kinds:
            paused.add_metric([k["kind"]], 1 if k.get("paused") else 0)
        yield paused
        if self.stats:  # none read (the database is away): left out, not an all-clear 0
            yield GaugeMetricFamily("jobfeed_oldest_due_seconds", "Age of the oldest queued job that is due "
                                    "(0 when none is).", value=self.stats.get("oldest_due_seconds") or 0)
        feed, batcher = self.feed, self.batcher
        own = ["pid"] if os.environ.get("PROMETHEUS_MULTIPROC_DIR") else []

        def counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, documentation, labels=own)
            family.add_metric([str(os.getpid())] if own else [], value)
            return family

        if feed is not None:
            yield GaugeMetricFamily("jobfeed_feed_connected", "1 while the feed's LISTEN connection is up.",
                                    value=1 if feed.connected else 0)
            yield GaugeMetricFamily("jobfeed_feed_watched_jobs", "Jobs with at least one open stream here.",
                                    value=feed.watched_jobs)
            yield counter("jobfeed_feed_notifications", "Change notifications received.", feed.notifications)
            yield counter("jobfeed_feed_rereads", "Batched re-reads of changed jobs.", feed.rereads)
            yield counter("jobfeed_feed_connects", "(Re)connects of the feed's listener.", feed.reconnects)
        if batcher is not None:
            yield counter("jobfeed_submit_statements",
                          "Statements that wrote POST /api/jobs submissions (several per statement under load).",
                          batcher.batches)
            yield counter("jobfeed_submit_items", "Submissions written by those statements.", batcher.items)


class _WrittenFiles(MultiProcessCollector):
    """Every process's files but empty ones, and but the live gauges of a
    process that is gone.

    prometheus-client creates a process's file empty and sizes it a moment
    later (client_python#1199): a scrape in between, or any scrape after a
    process was killed in between, would fail on it whole. An empty file holds
    nothing yet.

    A live gauge (open streams, which processes are up) counts only while its
    process runs. prometheus-client leaves dropping a dead process's files to
    the process manager (`mark_process_dead`), which uvicorn's, restarting a
    killed API process, does not call: its streams would be counted open and
    its start time shown up until the command stopped."""

    def collect(self):
        return self.merge([f for f in glob.glob(os.path.join(self._path, "*.db")) if _counted(f)], accumulate=True)


_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]*_(\d+)\.db")


def _counted(path: str) -> bool:
    try:
        if os.path.getsize(path) == 0:
            return False
    except FileNotFoundError:  # removed since the glob (a process marked dead by its manager)
        return False
    live = _LIVE_GAUGE_FILE.fullmatch(os.path.basename(path))
    return live is None or _running(int(live.group(1)))


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running all the same
        return True
    return True


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("jobfeed_http_requests", "HTTP requests by method, route and status.",
                                ["method", "route", "status"], registry=self.registry)
        self.submit_seconds = Histogram("jobfeed_submit_seconds",
                                        "POST /api/jobs from its body read to its answer, by kind.",
                                        ["kind"], buckets=FAST_BUCKETS, registry=self.registry)
        self.sse_lag = Histogram("jobfeed_sse_lag_seconds",
                                 "From a change's commit to its event being written to a stream.",
                                 ["stream"], buckets=FAST_BUCKETS, registry=self.registry)
        self.streams = Gauge("jobfeed_sse_streams", "Open server-sent event streams.", ["stream"],
                             registry=self.registry, multiprocess_mode="livesum")
        for name in STREAMS:
            self.streams.labels(name)  # shown at 0 before the first stream opens
        # One child per stream kind, looked up once: a fan-out observes once per
        # watcher, and labels() takes a lock and a dict look-up each time. The
        # same for every request's counter and every submission's histogram.
        self._sse_lag = {name: self.sse_lag.labels(name) for name in STREAMS}
        self._request_counters: dict[tuple[str, str, int], Counter] = {}
        self._submit_timers: dict[str, Histogram] = {}
        self._lags: list[tuple[str, float]] = []
        # One series per API process (labelled pid in multiprocess mode): which are up.
        Gauge("jobfeed_api_process_start_time_seconds", "When this API process started (epoch seconds).",
              registry=self.registry, multiprocess_mode="liveall").set(time.time())
        self._live = _Live()
        self._live_registry = CollectorRegistry()
        self._live_registry.register(self._live)

    @contextlib.contextmanager
    def stream(self, name: str) -> Iterator[None]:
        gauge = self.streams.labels(name)
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()

    @contextlib.contextmanager
    def submitting(self) -> Iterator[dict]:
        """Times a submission; the handler sets ["kind"] once it is known, and
        only a submission that got that far is observed."""
        labels: dict = {}
        start = time.perf_counter()
        yield labels
        kind = labels.get("kind")
        if kind is not None:
            timer = self._submit_timers.get(kind)
            if timer is None:
                timer = self._submit_timers[kind] = self.submit_seconds.labels(kind)
            timer.observe(time.perf_counter() - start)

    def delivered(self, stream: str, changed_at: float | None) -> None:
        """An event about a change committed at `changed_at` (epoch seconds, the
        database's clock) was written to a stream."""
        if changed_at is not None:
            child = self._sse_lag.get(stream) or self.sse_lag.labels(stream)
            child.observe(max(time.time() - changed_at, 0.0))

    def delivered_soon(self, stream: str, changed_at: float | None) -> None:
        """The same, observed only once the feed's loop lets go: a fan-out writes
        to every stream first, and its lags are observed after."""
        if changed_at is None:
            return
        if not self._lags:
            asyncio.get_running_loop().call_soon(self._observe_lags)
        self._lags.append((stream, max(time.time() - changed_at, 0.0)))

    def _observe_lags(self) -> None:
        lags, self._lags = self._lags, []
        for stream, lag in lags:
            (self._sse_lag.get(stream) or self.sse_lag.labels(stream)).observe(lag)

    def middleware(self, app: ASGIApp) -> ASGIApp:
        """Count each HTTP request by method, route template and status. Counted
        when the response starts, so a long stream is counted at once."""
        async def counted(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return

            host_route = scope.get("route")  # a host's Mount of jobfeed: no route of ours

            async def sending(message: Message) -> None:
                if message["type"] == "http.response.start":
                    route = scope.get("route")
                    path = (getattr(route, "path", None) if route is not host_route else None) or "unmatched"
                    key = (scope["method"], path, message["status"])
                    counter = self._request_counters.get(key)
                    if counter is None:
                        counter = self._request_counters[key] = self.requests.labels(key[0], path, str(key[2]))
                    counter.inc()
                await send(message)

            await app(scope, receive, sending)
        return counted

    def render(self, stats: dict, kinds: list[dict], feed, batcher) -> bytes:
        self._live.stats, self._live.kinds, self._live.feed, self._live.batcher = stats, kinds, feed, batcher
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            merged = CollectorRegistry()
            _WrittenFiles(merged)  # every process's files, this one's included
            return process_metrics.render(merged, self._live_registry)
        return process_metrics.render(self.registry, self._live_registry, process_metrics.PROCESS)


CONTENT_TYPE = process_metrics.CONTENT_TYPE
