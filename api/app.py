"""The API process: create_app() builds the Starlette app from its routes list.
Its lifespan finds the database, checks its schema version (it never migrates),
registers the kinds this process knows, and owns the pool (unless a host app
lends its own) and the live feed.

    uvicorn jobfeed.api.app:create_app --factory
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from typing import AsyncIterator, Callable, Union

import asyncpg

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import RedirectResponse
from starlette.routing import BaseRoute, Match, Mount, Route, Router
from starlette.staticfiles import StaticFiles

from jobfeed.worker import db, migrate, tasks
from jobfeed.worker.startup import settle_gc
from jobfeed.worker.queue import Queue
from jobfeed.worker.settings import Settings

from . import admin, health, jobs, openapi, outputs, ui
from .batching import SubmitBatcher
from .errors import EXCEPTION_HANDLERS
from .feed import Feed
from .jobstream import App
from .headers import SecurityHeaders
from .metrics import Metrics
from .state import Identify, Services

log = logging.getLogger("jobfeed.api")


class _PathFirst(Route):
    """A route whose path, matched, is its own whatever the method: any other
    method is its 405 (with Allow), not a later route's match. For the bulk
    paths, which /api/admin/jobs/{job_id} would read as a job id."""

    def matches(self, scope):
        match, child = super().matches(scope)
        return (Match.FULL if match == Match.PARTIAL else match), child


def _by_method(path: str, endpoints: dict[str, Callable]) -> Route:
    """One route for a path several methods serve, so that another method's
    405 names them all in Allow."""
    async def dispatch(request):
        return await endpoints["GET" if request.method == "HEAD" else request.method](request)
    return Route(path, dispatch, methods=list(endpoints))


def routes() -> list[BaseRoute]:
    return [
        Route("/api/jobs", jobs.submit, methods=["POST"]),
        Route("/api/jobs/{job_id}", jobs.get_job, methods=["GET"]),
        Route("/api/jobs/{job_id}/events", jobs.job_events, methods=["GET"]),
        Route("/api/jobs/{job_id}/signals/{name}", jobs.signal, methods=["POST"]),
        Route("/api/jobs/{job_id}/outputs/{name}", outputs.download, methods=["GET"]),
        Route("/api/requests/{request_id}", jobs.leave_request, methods=["DELETE"]),
        Route("/api/requests/{request_id}/leave", jobs.leave_request, methods=["POST"]),
        Route("/api/requests/{request_id}/stay", jobs.stay_request, methods=["POST"]),
        Route("/api/kinds", jobs.list_kinds, methods=["GET"]),
        Route("/api/live", health.live, methods=["GET"]),
        Route("/api/admin/jobs", admin.list_jobs, methods=["GET"]),
        _PathFirst("/api/admin/jobs/retry", admin.bulk_retry, methods=["POST"]),
        _PathFirst("/api/admin/jobs/cancel", admin.bulk_cancel, methods=["POST"]),
        Route("/api/admin/jobs/{job_id}", admin.get_job, methods=["GET"]),
        Route("/api/admin/jobs/{job_id}/retry", admin.retry, methods=["POST"]),
        Route("/api/admin/jobs/{job_id}/cancel", admin.cancel, methods=["POST"]),
        Route("/api/admin/kinds/{kind}/pause", admin.pause_kind, methods=["POST"]),
        Route("/api/admin/kinds/{kind}/resume", admin.resume_kind, methods=["POST"]),
        Route("/api/admin/schedules", admin.schedules, methods=["GET"]),
        Route("/api/admin/stats", admin.stats, methods=["GET"]),
        Route("/api/admin/workers", admin.workers, methods=["GET"]),
        Route("/api/admin/charts", admin.charts, methods=["GET"]),
        Route("/api/admin/events", admin.events, methods=["GET"]),
        _by_method("/api/admin/session", {"GET": admin.session, "POST": admin.sign_in, "DELETE": admin.sign_out}),
        Route("/healthz", health.healthz, methods=["GET"]),
        Route("/readyz", health.readyz, methods=["GET"]),
        Route("/metrics", health.metrics, methods=["GET"]),
        Route("/openapi.json", openapi.openapi_json, methods=["GET"]),
        Route("/", ui.index, methods=["GET"]),
        Route("/jobs/{job_id}", ui.job_page, methods=["GET"]),
        Route("/admin", ui.admin_page, methods=["GET"]),
        # check_dir=False: the UI's files may be added after the process starts
        Mount("/static", StaticFiles(directory=ui.STATIC_DIR, check_dir=False), name="static"),
    ]


def _relative_slash_redirects(router: Router) -> None:
    """Starlette redirects a path with a slash too many or too few to a URL
    that names the host the request's Host header gave (a cache or a link
    could carry that elsewhere); a path alone sends the client back to the
    host it asked."""
    router.redirect_slashes = False

    async def default(scope, receive, send):
        path = scope["path"]
        if scope["type"] == "http" and path != "/":
            other = dict(scope, path=path.rstrip("/") if path.endswith("/") else path + "/")
            if any(route.matches(other)[0] is not Match.NONE for route in router.routes):
                location = other["path"]  # no route takes "//...": never another host's
                if scope["query_string"]:
                    location += "?" + scope["query_string"].decode("latin-1")
                await RedirectResponse(location)(scope, receive, send)
                return
        await router.not_found(scope, receive, send)

    router.default = default


PoolSource = Union[asyncpg.Pool, Callable[[], asyncpg.Pool]]
# A host's pool lends the live feed one connection for LISTEN for good: the
# requests need at least one more.
MIN_HOST_POOL = 2


def host_pool(source: PoolSource | None) -> asyncpg.Pool | None:
    """The host's pool, from create_app(pool=), when the lifespan starts; a
    mistake said here rather than passed over (a None would have jobfeed open a
    pool of its own, or start an embedded server)."""
    if source is None:
        return None
    given = source() if callable(source) else source
    if not isinstance(given, asyncpg.Pool) and inspect.isawaitable(given):  # (a pool is awaitable too)
        if inspect.iscoroutine(given):
            given.close()  # never awaited: no warning about it on top
        raise TypeError("create_app(pool=): the callable answered an awaitable; give a plain function "
                        "that returns the pool (made in your lifespan before it enters jobfeed's)")
    if not isinstance(given, asyncpg.Pool):
        raise TypeError(f"create_app(pool=): got {type(given).__name__}, not an asyncpg pool (create your pool "
                        "in your lifespan before it enters jobfeed's)")
    if given.get_max_size() < MIN_HOST_POOL:
        raise ValueError(f"create_app(pool=): a pool of at most {given.get_max_size()} connection leaves none "
                         f"for requests beside the live feed's LISTEN: give it max_size={MIN_HOST_POOL} or more")
    return given


def create_app(settings: Settings | None = None, *, pool: PoolSource | None = None,
               identify: Identify | None = None) -> Starlette:
    """jobfeed's API and UI as a Starlette app, to serve alone or to mount into a
    host app under a prefix (the host enters `lifespan(app)` from its own).

    pool: the host's asyncpg pool, or a callable answering it when the lifespan
    starts (for a pool the host creates in its own lifespan). jobfeed then uses
    it, holds one of its connections for LISTEN, and never closes it.
    identify: `identify(request) -> str | None` names who sent a request."""
    settings = settings or Settings.from_env()
    svc = Services(settings=settings, metrics=Metrics(), identify=identify)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        hosts = host_pool(pool)
        dsn = None if hosts is not None else await db.resolve_dsn(settings)
        # `jobfeed migrate` changes the schema, never the API
        await migrate.require_schema(hosts if hosts is not None else dsn, migrate.API_ROLE)
        tasks.load_tasks(settings.tasks)
        svc.pool = hosts if hosts is not None else await db.create_pool(dsn or "", name="jobfeed-api")
        try:
            svc.queue = Queue(svc.pool, settings=settings)
            svc.batcher = SubmitBatcher(svc.queue, max_payload=settings.max_payload,
                                        max_batch=settings.submit_batch,
                                        max_active=settings.max_active_per_requester)
            await tasks.register_kinds(svc.queue, settings, overwrite=False)
            svc.feed = Feed(dsn or svc.pool, svc.queue, batch=settings.feed_batch,
                            health_interval=settings.listener_health, ping=settings.sse_ping)
            await svc.feed.start()
            if hosts is None:  # serving alone: the process is ours to tune
                settle_gc()
            svc.running = True
            try:
                yield
            finally:
                svc.running = False
                await svc.feed.close()
        finally:
            if hosts is None:  # a host's pool is the host's to close
                await svc.pool.close()

    middleware = [Middleware(svc.metrics.middleware), Middleware(SecurityHeaders)]
    if settings.cors_origins:  # none allowed: no layer to pass through on every request
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                                     allow_methods=["GET", "POST", "DELETE"],
                                     allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
                                     expose_headers=["Location"]))
    app = App(
        routes=routes(),
        middleware=middleware,
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
    _relative_slash_redirects(app.router)
    app.state.services = svc
    return app


def lifespan(app: Starlette) -> contextlib.AbstractAsyncContextManager[object]:
    """The lifespan of an app create_app() made, for a host that mounts it:
    Starlette runs only the outermost app's lifespan, so the host enters this
    one from its own:

        async with jobfeed.api.lifespan(jobs):
            yield
    """
    return app.router.lifespan_context(app)


def end_streams(app: Starlette) -> None:
    """End the app's open event streams. For a server that stops without a
    signal uvicorn sees (an embedding process calling server.should_exit):
    uvicorn waits for open responses before it shuts the app down."""
    feed = getattr(app.state.services, "feed", None)  # none before the lifespan starts
    if feed is not None:
        feed.end_streams()
