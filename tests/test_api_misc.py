"""Health, readiness, metrics, the OpenAPI document against the routes list, the
UI's pages and CORS."""

from __future__ import annotations

import gc
import re
import uuid

import pytest
from starlette.routing import Mount, Route

from jobfeed.api import openapi, ui
from jobfeed.api.app import create_app, routes
from jobfeed.worker import migrate
from servers import UNKNOWN_JOB_ID, asgi_client, make_settings


@pytest.fixture
async def app(dsn):
    return create_app(make_settings(dsn))


@pytest.fixture
async def client(app):
    async with asgi_client(app) as c:
        yield c


class _ServerCycle:
    """What an ASGI server keeps for a request (uvicorn's RequestResponseCycle):
    the scope, and the send it gives the app, a method of its own."""

    def __init__(self, path: str):
        self.scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                      "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
                      "query_string": b"", "headers": [(b"host", b"jobfeed.test")],
                      "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80)}
        self.status = 0

    async def receive(self) -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]


async def test_a_request_leaves_nothing_to_the_garbage_collector(app):
    """The app keeps nothing of a request in its scope that refers back to the
    server's objects for it: such a cycle per request left the collector
    walking the young objects every few thousand requests (bench/rounds.md,
    thirty-fourth round)."""
    async with app.router.lifespan_context(app):
        paths = ("/healthz", f"/api/jobs/{UNKNOWN_JOB_ID}", "/api/kinds") * 10
        for path in paths[:3]:  # what is made once is made here
            cycle = _ServerCycle(path)
            await app(cycle.scope, cycle.receive, cycle.send)
        statuses = []
        gc.collect()
        gc.disable()
        try:
            for path in paths:
                cycle = _ServerCycle(path)
                await app(cycle.scope, cycle.receive, cycle.send)
                statuses.append(cycle.status)
            del cycle
            found = gc.collect()
        finally:
            gc.enable()
    assert statuses == [200, 404, 200] * 10
    assert found < len(paths), f"{found} objects in reference cycles after {len(paths)} requests"


async def test_healthz_and_readyz(client, pool):
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200
    needs = migrate.SCHEMA_VERSION
    schema = {"version": needs, "compatible_from": 0, "needs": needs}
    assert ready.json() == {"status": "ready", "database": True, "schema": schema, "feed": True}

    # A newer release migrated (rolling deploy): still ready.
    await pool.execute("update jobfeed.schema_version set version = version + 1")
    assert (await client.get("/readyz")).status_code == 200
    # One that dropped what this release calls: not ready.
    await pool.execute("update jobfeed.schema_version set compatible_from = version")
    assert (await client.get("/readyz")).status_code == 503
    # Older than this code needs: not ready.
    await pool.execute("update jobfeed.schema_version set version = $1, compatible_from = 0", needs - 1)
    stale = await client.get("/readyz")
    assert stale.status_code == 503 and stale.json()["schema"]["version"] == needs - 1


async def test_readyz_is_503_when_the_database_is_gone(app, client):
    app.state.services.pool.terminate()
    gone = await client.get("/readyz")
    assert gone.status_code == 503 and gone.json()["database"] is False


async def test_metrics(client):
    for target in ("a", "b"):
        assert (await client.post("/api/jobs", json={"kind": "demo", "target": target})).status_code == 201
    await client.get(f"/api/jobs/{uuid.uuid4()}")
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = response.text
    assert 'jobfeed_jobs{kind="demo",state="queued"} 2' in text
    assert 'jobfeed_http_requests_total{method="POST",route="/api/jobs",status="201"} 2' in text
    assert 'jobfeed_http_requests_total{method="GET",route="/api/jobs/{job_id}",status="404"} 1' in text
    assert 'jobfeed_sse_streams{stream="job"} 0' in text
    assert "jobfeed_feed_connected 1" in text
    # Every sample line is "name{labels} number" under a TYPE line (numbers as
    # prometheus-client writes them: 2.0, 6.4e-06, +Inf).
    for line in text.splitlines():
        if not line.startswith("#"):
            assert re.fullmatch(r'[a-z_]+(\{([a-z_]+="([^"\\]|\\.)*",?)+\})? (-?[0-9.e+-]+|[+-]Inf|NaN)', line), line


def _route_operations() -> set[tuple[str, str]]:
    found = set()
    for route in routes():
        if isinstance(route, Mount):
            found.add(("GET", route.path + "/{path}"))
        else:
            assert isinstance(route, Route)
            found |= {(m, route.path) for m in route.methods if m != "HEAD"}
    return found


async def test_openapi_describes_every_route(client):
    assert _route_operations() == set(openapi.OPERATIONS)
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    doc = response.json()
    assert doc["openapi"].startswith("3.")
    served = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert served == _route_operations()
    # Every reference resolves, every operation answers something.
    refs = re.findall(r'"\$ref": "#/components/schemas/(\w+)"', response.text.replace('":"', '": "'))
    assert refs and set(refs) <= set(doc["components"]["schemas"])
    for path, ops in doc["paths"].items():
        for op in ops.values():
            assert op["summary"] and op["responses"]
            assert "503" in op["responses"] or not path.startswith("/api/")  # the database may be away
            for param in op.get("parameters", []):
                if param["in"] == "path":
                    assert param["required"] is True


@pytest.mark.parametrize("path, name", [("/", "index.html"), (f"/jobs/{UNKNOWN_JOB_ID}", "job.html"),
                                        ("/admin", "admin.html")])
async def test_ui_pages_are_served_from_static(client, path, name):
    response = await client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    page = (ui.STATIC_DIR / name).read_text()
    if name == "job.html":  # the page's closing beacon asks for the server's grace
        assert ui.LEAVE_GRACE_META.format("") in page
        page = page.replace(ui.LEAVE_GRACE_META.format(""), ui.LEAVE_GRACE_META.format("20"))
    assert response.text == page


async def test_static_files(client):
    files = [p for p in ui.STATIC_DIR.rglob("*") if p.is_file()]
    assert files
    for path in files:
        response = await client.get("/static/" + path.relative_to(ui.STATIC_DIR).as_posix())
        assert response.status_code == 200 and response.content == path.read_bytes()
    assert (await client.get("/static/no-such-file.js")).status_code == 404
    assert (await client.get("/static/../pyproject.toml")).status_code == 404


async def test_cors_allows_configured_origins_only(dsn):
    app = create_app(make_settings(dsn, cors_origins=("https://app.example",)))
    async with asgi_client(app) as client:
        preflight = await client.options("/api/jobs", headers={
            "origin": "https://app.example", "access-control-request-method": "POST",
            "access-control-request-headers": "content-type, authorization"})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        simple = await client.get("/api/kinds", headers={"origin": "https://app.example"})
        assert simple.headers["access-control-allow-origin"] == "https://app.example"
        other = await client.get("/api/kinds", headers={"origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


async def test_without_configured_origins_no_cross_origin_access(dsn, demo_kind):
    async with asgi_client(create_app(make_settings(dsn))) as client:
        preflight = await client.options("/api/jobs", headers={
            "origin": "https://app.example", "access-control-request-method": "POST"})
        assert preflight.status_code == 405 and "access-control-allow-origin" not in preflight.headers
        simple = await client.get("/api/kinds", headers={"origin": "https://app.example"})
        assert simple.status_code == 200 and "access-control-allow-origin" not in simple.headers
