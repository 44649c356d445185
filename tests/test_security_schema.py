"""The OpenAPI document matches what the routes answer: schemathesis fuzzes every
operation of a real server (real uvicorn, real database) for about a minute and
fails on any 5xx or any answer the document does not describe. Event streams
are left out (an open stream never ends); tests/test_sse_*.py cover them."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys

import httpx
import pytest

from servers import ADMIN_TOKEN, ROOT, serve

CHECKS = ",".join(["not_a_server_error", "status_code_conformance", "content_type_conformance",
                   "response_schema_conformance", "response_headers_conformance"])


@pytest.mark.timeout(180)
async def test_schemathesis_finds_no_5xx_and_no_undocumented_answer(dsn):
    if shutil.which("st", path=os.path.dirname(sys.executable)) is None:
        pytest.fail("schemathesis is missing: install the [test] extra")
    async with serve(dsn) as server:
        proc = await asyncio.create_subprocess_exec(
            os.path.join(os.path.dirname(sys.executable), "st"), "run", f"{server.url}/openapi.json",
            "--checks", CHECKS, "--max-time", "50", "--max-examples", "40", "--seed", "1",
            "--phases", "examples,coverage,fuzzing", "--request-timeout", "10", "--workers", "1",
            "--exclude-path-regex", r".*/events$",
            "-H", f"Authorization: Bearer {ADMIN_TOKEN}", "--no-color",
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "SCHEMATHESIS_HOOKS": ""})
        output, _ = await asyncio.wait_for(proc.communicate(), 150)
    text = output.decode(errors="replace")
    assert proc.returncode == 0, text[-6000:]
    assert "No issues found" in text or "passed" in text.lower(), text[-3000:]


# Answers schemathesis does not provoke by itself (wrong content types, bodies
# over the limit, foreign origins, stream caps): each must be one the document
# names for its operation, in the error shape.

from jobfeed.api.app import create_app  # noqa: E402
from jobfeed.api import openapi  # noqa: E402
from servers import UNKNOWN_JOB_ID, asgi_client, make_settings  # noqa: E402


def documented(method: str, template: str, status: int) -> bool:
    return str(status) in openapi.document()["paths"][template][method.lower()]["responses"]


async def test_refusals_are_documented(dsn):
    async with asgi_client(create_app(make_settings(dsn))) as client:
        answers = []
        for path in ("/api/jobs", "/api/admin/session"):
            answers += [
                ("POST", path, await client.post(path, content=b"{", headers={"content-type": "application/json"})),
                ("POST", path, await client.post(path, content=b"{}", headers={"content-type": "text/plain"})),
                ("POST", path, await client.post(path, content=b"{" + b" " * 200_000 + b"}",
                                                 headers={"content-type": "application/json"})),
            ]
        signed_in = await client.post("/api/admin/session", json={"token": ADMIN_TOKEN})
        assert signed_in.status_code == 200
        foreign = {"origin": "http://elsewhere.test"}
        answers += [
            ("POST", "/api/admin/jobs/{job_id}/cancel",
             await client.post(f"/api/admin/jobs/{UNKNOWN_JOB_ID}/cancel", headers=foreign)),
            ("POST", "/api/admin/jobs/{job_id}/retry",
             await client.post(f"/api/admin/jobs/{UNKNOWN_JOB_ID}/retry", headers=foreign)),
            ("DELETE", "/api/admin/session", await client.delete("/api/admin/session", headers=foreign)),
        ]
        statuses = {(m, p, r.status_code) for m, p, r in answers}
        assert {s for _, _, s in statuses} >= {400, 403, 413, 415}, statuses
        for method, path, response in answers:
            assert documented(method, path, response.status_code), (method, path, response.status_code)
            assert set(response.json()["error"]) == {"code", "message"}

    async with serve(dsn, max_streams_per_client=1) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            job = (await http.post("/api/jobs", json={"kind": "demo", "target": "doc"})).json()
            async with http.stream("GET", f"/api/jobs/{job['id']}/events") as first:
                assert first.status_code == 200
                second = await http.get(f"/api/jobs/{job['id']}/events")
                assert second.status_code == 429
                assert documented("GET", "/api/jobs/{job_id}/events", 429)
                third = await http.get("/api/admin/events", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
                assert third.status_code == 429 and documented("GET", "/api/admin/events", 429)
    assert documented("GET", "/metrics", 403) and documented("GET", "/metrics", 401)
