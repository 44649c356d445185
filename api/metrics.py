"""Prometheus text exposition, written by hand (a few counters and gauges do
not need a client library): requests by route, open streams, the feed's health,
and jobs by kind and state from the stats query."""

from __future__ import annotations

import collections
import contextlib
from typing import Iterator

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class Metrics:
    def __init__(self):
        self.requests: collections.Counter[tuple[str, str, int]] = collections.Counter()
        self.streams: collections.Counter[str] = collections.Counter()

    @contextlib.contextmanager
    def stream(self, name: str) -> Iterator[None]:
        self.streams[name] += 1
        try:
            yield
        finally:
            self.streams[name] -= 1

    def middleware(self, app: ASGIApp) -> ASGIApp:
        """Count each HTTP request by method, route template and status. Counted
        when the response starts, so a long stream is counted at once."""
        async def counted(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return

            async def sending(message: Message) -> None:
                if message["type"] == "http.response.start":
                    route = scope.get("route")
                    path = getattr(route, "path", None) or "unmatched"
                    self.requests[(scope["method"], path, message["status"])] += 1
                await send(message)

            await app(scope, receive, sending)
        return counted

    def render(self, stats: dict, feed, batcher) -> str:
        out: list[str] = []

        def family(name: str, kind: str, help_text: str, samples: list[tuple[dict, float]]) -> None:
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            for labels, value in samples:
                out.append(f"{name}{_labels(labels)} {_number(value)}")

        family("jobfeed_jobs", "gauge", "Jobs by kind and true state.",
               [({"kind": kind, "state": state}, n)
                for kind, states in sorted(stats.get("counts", {}).items())
                for state, n in sorted(states.items())])
        oldest = stats.get("oldest_due_seconds")
        family("jobfeed_oldest_due_seconds", "gauge", "Age of the oldest queued job that is due.",
               [({}, oldest or 0)])
        family("jobfeed_http_requests_total", "counter", "HTTP requests by method, route and status.",
               [({"method": m, "route": r, "status": str(s)}, n)
                for (m, r, s), n in sorted(self.requests.items())])
        family("jobfeed_sse_streams", "gauge", "Open server-sent event streams.",
               [({"stream": name}, self.streams.get(name, 0)) for name in ("job", "admin")])
        family("jobfeed_feed_connected", "gauge", "1 while the feed's LISTEN connection is up.",
               [({}, 1 if feed.connected else 0)])
        family("jobfeed_feed_watched_jobs", "gauge", "Jobs with at least one open stream here.",
               [({}, feed.watched_jobs)])
        family("jobfeed_feed_notifications_total", "counter", "Change notifications received.",
               [({}, feed.notifications)])
        family("jobfeed_feed_rereads_total", "counter", "Batched re-reads of changed jobs.",
               [({}, feed.rereads)])
        family("jobfeed_feed_connects_total", "counter", "(Re)connects of the feed's listener.",
               [({}, feed.reconnects)])
        family("jobfeed_submit_statements_total", "counter",
               "Statements that wrote POST /api/jobs submissions (several per statement under load).",
               [({}, batcher.batches)])
        family("jobfeed_submit_items_total", "counter", "Submissions written by those statements.",
               [({}, batcher.items)])
        return "\n".join(out) + "\n"


def _labels(labels: dict) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
