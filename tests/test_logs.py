"""Logs: JOBFEED_LOG_FORMAT=json writes one JSON object per line, uvicorn's
lines too, and what a handler logs names its job; a whole run (an API, a
worker, `jobfeed up`) never logs the admin token, a database password or a
URL's credentials and query."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import httpx
import pytest

from conftest import JOBFEED, worker_env
from jobfeed.worker import db, logs
from log_tasks import SECRET_KEY, SECRET_PASSWORD
from relay import Relay
from servers import Process, free_port
from waiting import eventually

ADMIN_TOKEN = "planted-admin-token-for-the-logs-test"
DB_PASSWORD = "planted-database-password-55"
SECRETS = (ADMIN_TOKEN, DB_PASSWORD, SECRET_PASSWORD, SECRET_KEY)


def record(message: str, *args) -> logging.LogRecord:
    return logging.LogRecord("tests", logging.INFO, __file__, 1, message, args, None)


def test_json_lines_carry_the_job_of_the_task_that_logged():
    formatter = logs.JsonFormatter()
    outside = json.loads(formatter.format(record("plain %s", "line")))
    assert outside["message"] == "plain line" and outside["level"] == "info" and "job_id" not in outside

    context = logs.job_context(job_id="j1", kind="k", attempt=2, generation=3, worker="w")
    inside = json.loads(context.run(formatter.format, record("in %s", "handler")))
    assert {k: inside[k] for k in ("job_id", "kind", "attempt", "generation", "worker")} == \
        {"job_id": "j1", "kind": "k", "attempt": 2, "generation": 3, "worker": "w"}
    assert logs.current_job.get() is None  # the job's fields stay in its task's context


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_an_error_without_text_is_named_by_its_type(log_format):
    """A TimeoutError (a frozen database) has no text: its warning read
    "heartbeat failed ()"; an error with text keeps it."""
    line = logs.formatter(log_format).format(record("heartbeat failed (%s); again in %s (%s)",
                                                    TimeoutError(), 1.5, OSError("gone")))
    assert "heartbeat failed (TimeoutError); again in 1.5 (gone)" in line, line


def test_a_text_record_is_one_line_whatever_its_message_holds():
    """From a black-box pass: a handler's "multi\nline" message made three
    lines of text log (forgeable ones), and a colour code reached the
    terminal; JSON escaped both. A traceback still follows on lines of its own."""
    formatter = logs.TextFormatter()
    line = formatter.format(record("multi\nline %s", "\x1b[31mred\u202e"))
    assert line.endswith("tests: multi\\nline \\x1b[31mred\\u202e") and "\n" not in line, line
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord("tests", logging.ERROR, __file__, 1, "it failed", (), sys.exc_info())
    first, *rest = formatter.format(failed).splitlines()
    assert first.endswith("it failed") and rest[0] == "Traceback (most recent call last):"


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_both_formats_redact_url_credentials_and_queries(log_format):
    line = logs.formatter(log_format).format(record("GET %s", "https://u:pw-1@h.example/p?key=k-2#f"))
    assert "pw-1" not in line and "k-2" not in line and "https://***@h.example/p?***" in line


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_an_access_line_keeps_its_path_not_its_query(log_format):
    # uvicorn's access line: a request id in ?request= opens a job under requesters access
    line = logs.formatter(log_format).format(record('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET",
                                                    "/api/jobs/j1/events?request=r-3&wait=1s", "1.1", 200))
    assert "r-3" not in line and "GET /api/jobs/j1/events?*** HTTP/1.1" in line
    # and in a path: a request's leave or stay (navigator.sendBeacon's)
    rid = "01a2b3c4-0000-7000-8000-000000000001"
    for path in (f"/api/requests/{rid}/leave", f"/api/requests/{rid}", f"/api/requests/{rid}/stay?x=1"):
        line = logs.formatter(log_format).format(record('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "POST",
                                                        path, "1.1", 200))
        assert rid not in line and "POST /api/requests/***" in line, line


def test_a_database_url_is_printed_without_its_password():
    assert logs.without_password("postgresql://bob:s3cret@db:5432/jobs?sslmode=require") == \
        "postgresql://bob:***@db:5432/jobs?sslmode=require"
    assert logs.without_password("postgresql://postgres:@/t?host=/tmp/x") == "postgresql://postgres:@/t?host=/tmp/x"
    # an @ in the password, and libpq's ?password=
    assert logs.without_password("postgresql://bob:s3@cret@db/jobs") == "postgresql://bob:***@db/jobs"
    assert logs.without_password("postgresql://bob@db/jobs?password=s3cret&sslmode=require") == \
        "postgresql://bob@db/jobs?password=***&sslmode=require"


def json_lines(output: list[str]) -> list[dict]:
    entries = []
    for line in output:
        if line.startswith("jobfeed is up") or line.startswith("  "):
            continue  # `jobfeed up`'s banner, on stdout
        entries.append(json.loads(line))  # every log line is one JSON object
    return entries


@pytest.mark.full
async def test_a_whole_run_logs_json_and_never_a_secret(dsn, queue):
    assert dsn.startswith("postgresql://postgres:@")
    # The test server trusts local connections: the password is sent, never checked.
    secret_dsn = dsn.replace("postgresql://postgres:@", f"postgresql://postgres:{DB_PASSWORD}@")
    tests = str(Path(__file__).parent)
    env = worker_env(secret_dsn, JOBFEED_LOG_FORMAT="json", JOBFEED_ADMIN_TOKEN=ADMIN_TOKEN,
                     JOBFEED_TASKS="jobfeed.demo,log_tasks", PYTHONPATH=tests)
    api_port, up_port = free_port(), free_port()
    api = await Process(JOBFEED + ["api", "--port", str(api_port)], env).start(ready=r"Uvicorn running|started")
    worker = await Process(JOBFEED + ["worker", "--poll", "200ms"], env).start(ready=r"kinds")
    outputs = []
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=10) as client:
            admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            answer = await client.post("/api/jobs", json={"kind": "leaky", "target": "t1"})
            assert answer.status_code == 201, answer.text
            location = answer.headers["location"]

            async def done():
                view = (await client.get(location)).json()
                return view if view["status"] == "completed" else None
            await eventually(done, what="the leaky job to complete on its second attempt")
            request_id = answer.json()["request_id"]  # a capability: never logged
            assert (await client.get(location, params={"request": request_id})).status_code == 200
            assert (await client.get("/api/admin/stats", headers=admin)).status_code == 200
            assert (await client.get("/api/admin/stats", headers={"Authorization": "Bearer wrong"})).status_code == 401
    finally:
        assert await worker.stop(timeout=15) == 0, worker.log
        await api.stop(timeout=15)
        outputs += [api.output, worker.output]

    up = await Process(JOBFEED + ["up", "--grace", "1s", "--port", str(up_port)], env).start(
        ready=r"  database: ")
    try:
        banner = "\n".join(up.output)
        assert "token: (JOBFEED_ADMIN_TOKEN)" in banner and "postgres:***@" in banner
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{up_port}", timeout=10) as client:
            answer = await client.post("/api/jobs", json={"kind": "leaky", "target": "t2"})
            await eventually(lambda: _completed(client, answer.headers["location"]), what="t2 to complete")
    finally:
        assert await up.stop(timeout=15) == 0, up.log
        outputs.append(up.output)

    everything = "\n".join(line for output in outputs for line in output)
    for secret in (*SECRETS, request_id):
        assert secret not in everything, f"{secret} was logged"
    api_entries, worker_entries, up_entries = (json_lines(o) for o in outputs)
    # uvicorn's own lines are JSON too: its start line and its access log
    assert any(e["logger"].startswith("uvicorn") for e in api_entries)
    assert any(e["logger"] == "uvicorn.access" and "/api/jobs" in e["message"] for e in api_entries)
    # the handler's line names its job, on both attempts, with credentials and query redacted
    handler_lines = [e for e in worker_entries if e["logger"] == "tests.leaky"]
    assert [e["attempt"] for e in handler_lines] == [1, 2]
    assert all(e["kind"] == "leaky" and e["job_id"] == location.rsplit("/", 1)[1] and e["worker"]
               for e in handler_lines)
    assert "https://***@upstream.example/v1/thing?***" in handler_lines[0]["message"]
    assert any(e["logger"] == "tests.leaky" and e["job_id"] for e in up_entries)
    assert not any("job_id" in e for e in worker_entries if e["logger"] == "jobfeed.worker"
                   and "kinds" in e["message"]), "lines outside a job name none"


async def _completed(client: httpx.AsyncClient, location: str):
    return (await client.get(location)).json()["status"] == "completed"


@pytest.mark.parametrize("how", ["env", "flag"])
async def test_jobfeed_api_logs_at_the_level_asked_for(dsn, how):
    """jobfeed api logged uvicorn's start lines and every access line at INFO
    whatever JOBFEED_LOG_LEVEL or --log-level said."""
    port = free_port()
    flag = ["--log-level", "warning"] if how == "flag" else []
    env = worker_env(dsn, JOBFEED_ADMIN_TOKEN=ADMIN_TOKEN, **({"JOBFEED_LOG_LEVEL": "warning"} if how == "env" else {}))
    api = await Process(JOBFEED + flag + ["api", "--port", str(port)], env).start()

    async def answers():
        try:
            async with httpx.AsyncClient(timeout=2) as client:
                return (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
        except httpx.HTTPError:
            return False
    try:
        await eventually(answers, what="the API to answer")
    finally:
        assert await api.stop(timeout=15) == 0, api.log
    assert not [line for line in api.output if "INFO" in line or "Uvicorn running" in line], api.log


async def test_a_pool_that_cannot_reconnect_says_why_in_one_line(dsn, caplog):
    """While the database is away, asyncpg retries a pool's standing
    connections every few seconds; each try logged a full traceback before."""
    relay = Relay(dsn)
    await relay.open()
    pool = await db.create_pool(relay.dsn, min_size=1, max_size=2, name="jobfeed-test-floor")
    try:
        caplog.set_level(logging.WARNING, logger="asyncpg.pool")
        await relay.shut()  # the idle connection is cut, and new ones refused

        async def logged():
            return any(r.name == "asyncpg.pool" for r in caplog.records)
        await eventually(logged, timeout=10, what="a failed reconnect logged")
    finally:
        await pool.close()
    (record, *_) = [r for r in caplog.records if r.name == "asyncpg.pool"]
    assert record.exc_info is None and "Traceback" not in caplog.text
    assert "could not reconnect" in record.getMessage() and "Error" in record.getMessage(), record.getMessage()


def test_an_unknown_log_format_is_refused_at_start():
    import os
    import subprocess
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBFEED_")}
    env["JOBFEED_LOG_FORMAT"] = "xml"
    done = subprocess.run([sys.executable, "-m", "jobfeed.worker.cli", "sweeper", "--once"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "JOBFEED_LOG_FORMAT" in done.stderr


@pytest.mark.parametrize("args, named", [
    (["sweeper", "--once"], "JOBFEED_LEASE"),  # a bad setting
    (["api", "--port", "abc"], "--port"),  # a bad flag, which argparse refuses
    (["bogus"], "invalid choice"),
])
def test_a_fatal_error_is_a_json_line_in_json_mode(args, named):
    import os
    import subprocess
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBFEED_")}
    env.update(JOBFEED_LOG_FORMAT="json", JOBFEED_LEASE="soon")
    done = subprocess.run([sys.executable, "-m", "jobfeed.worker.cli", *args], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    entry = json.loads(line)
    assert entry["level"] == "error" and entry["logger"] == "jobfeed" and named in entry["message"]
    if named != "JOBFEED_LEASE":  # text mode keeps argparse's usage and error
        env["JOBFEED_LOG_FORMAT"] = "text"
        done = subprocess.run([sys.executable, "-m", "jobfeed.worker.cli", *args], env=env,
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 2 and done.stderr.startswith("usage: jobfeed") and named in done.stderr


def test_show_of_an_unknown_job_is_a_json_line_in_json_mode(dsn):
    """Before: `error: not_found: ...` as plain text, the one command error that was."""
    import os
    import subprocess
    import uuid
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBFEED_")}
    env.update(JOBFEED_LOG_FORMAT="json", DATABASE_URL=dsn)
    done = subprocess.run([sys.executable, "-m", "jobfeed.worker.cli", "show", str(uuid.uuid4()), "--json"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert json.loads(line)["message"].startswith("not_found: no job ")
