"""OpenTelemetry spans, with the extra `jobfeed[otel]`: the HTTP submit, the SQL
submit, each claim, each handler run (attempt and generation as attributes)
and its outcome. The submitter's trace context (`traceparent`) is stored with
the job; every run of it, retries included, is a child of that context and
links to it, so one trace shows a request and the work it caused.

Without the opentelemetry package nothing here imports it and every function
is a no-op. With it but no SDK tracer provider set, every function is a no-op
too (checked on each call until one is set, since an application may set it
after importing jobfeed): a worker does not pay for spans nobody records."""

from __future__ import annotations

import contextlib
import importlib.util
import time
from typing import Any, Iterator

INSTALLED = importlib.util.find_spec("opentelemetry") is not None
RECHECK = 1.0  # seconds between looks for a tracer provider while there is none
_recording = False  # a real tracer provider was seen; once set, it stays
_next_look = 0.0


def active() -> bool:
    """Whether spans record: the package is installed and an SDK (anything but
    OpenTelemetry's proxy or no-op provider) is the global tracer provider.
    Asked several times per job, so a "no" is kept for RECHECK seconds (the
    look reads the environment)."""
    global _recording, _next_look
    if _recording or not INSTALLED:
        return _recording
    now = time.monotonic()
    if now < _next_look:
        return False
    _next_look = now + RECHECK
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    _recording = not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    return _recording


_NOTHING = contextlib.nullcontext()  # stateless, so one serves every block


def span(name: str, *, parent: str | None = None, attributes: dict[str, Any] | None = None,
         server: bool = False) -> contextlib.AbstractContextManager[Any]:
    """A span around the block, current inside it; `parent` is a traceparent
    (the block's span becomes its child and links to it)."""
    return _span(name, parent, attributes, server) if active() else _NOTHING


@contextlib.contextmanager
def _span(name: str, parent: str | None, attributes: dict[str, Any] | None, server: bool) -> Iterator[Any]:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context, links = None, []
    if parent:
        context = TraceContextTextMapPropagator().extract({"traceparent": parent})
        remote = trace.get_current_span(context).get_span_context()
        if remote.is_valid:
            links = [trace.Link(remote)]
        else:
            context = None
    kind = trace.SpanKind.SERVER if server else trace.SpanKind.INTERNAL
    with trace.get_tracer("jobfeed").start_as_current_span(
            name, context=context, kind=kind, links=links, attributes=attributes or {}) as current:
        yield current


def current_traceparent() -> str | None:
    """The current span's context as a traceparent, to store with a job; None
    when nothing records (no SDK, or no span)."""
    if not active():
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def trace_id() -> str | None:
    """The current trace's id (32 hex digits), for log lines."""
    if not active():
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


def annotate(attributes: dict[str, Any]) -> None:
    """Set attributes on the current span (if any records)."""
    if not active():
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(attributes)
