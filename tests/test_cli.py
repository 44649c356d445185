"""The jobfeed command: submit (plain, --json, --follow), show, migrate, bad input
and bad settings refused with a message and a non-zero exit, changing nothing."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import urllib.parse
import uuid

import asyncpg
import httpx
import pytest

from conftest import JOBFEED, path_with_tests, worker_env
from jobfeed.worker import db, tasks
from jobfeed.worker.settings import SettingError, Settings
from jobfeed.worker.startup import GC_YOUNG
from servers import ADMIN_TOKEN, Process


def jobfeed(dsn: str, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(JOBFEED + list(args), env=worker_env(dsn, **env), capture_output=True, text=True,
                          timeout=timeout)


async def job_count(pool) -> int:
    return await pool.fetchval("select count(*) from jobfeed.jobs")


async def test_submit_prints_the_id_and_dedupes(dsn, pool):
    first = jobfeed(dsn, "submit", "demo", "t1")
    assert first.returncode == 0, first.stderr
    job_id = uuid.UUID(first.stdout.strip())
    again = jobfeed(dsn, "submit", "demo", "t1", "--json")
    assert again.returncode == 0, again.stderr
    view = json.loads(again.stdout)
    assert view["id"] == str(job_id) and view["deduplicated"] is True and view["status"] == "queued"
    assert await job_count(pool) == 1


async def _unused(job, ctx):
    return None


async def test_submit_is_a_request_with_the_kinds_request_policies(dsn, pool, queue):
    """As over HTTP: --json carries request_id (for `jobfeed leave`) and the
    view's position; reuse_for and on_duplicate="reject_different" apply."""
    env = {"JOBFEED_TASKS": "jobfeed.demo,cli_tasks", "PYTHONPATH": path_with_tests()}
    # a worker of these kinds has started: it writes their policies (a producer never does)
    own = tasks.Registry()
    for kind, policy in (("cached", {"reuse_for": "10m"}), ("strict", {"on_duplicate": "reject_different"})):
        own.task(kind, **policy)(_unused)
        await tasks.register_kind(queue, own.get(kind).resolved(Settings()), overwrite=True)
    first = json.loads(jobfeed(dsn, "submit", "cached", "c", "--json", **env).stdout)
    assert first["position"] == 0 and first["requesters"] == 1 and first["deduplicated"] is False
    (job,) = await queue.claim(["cached"], 1, "w")
    await queue.complete(job.id, job.generation, None)
    again = json.loads(jobfeed(dsn, "submit", "cached", "c", "--json", **env).stdout)
    assert (again["id"], again["reused"], again["status"]) == (first["id"], True, "completed")
    forced = json.loads(jobfeed(dsn, "submit", "cached", "c", "--json", "--force", **env).stdout)
    assert forced["id"] != first["id"] and forced["reused"] is False

    assert jobfeed(dsn, "submit", "strict", "s", "--payload", '{"a": 1}', **env).returncode == 0
    differs = jobfeed(dsn, "submit", "strict", "s", "--payload", '{"a": 2}', **env)
    assert differs.returncode == 2 and "payload_conflict" in differs.stderr
    left = jobfeed(dsn, "leave", forced["request_id"], "--json", **env)
    assert left.returncode == 0 and json.loads(left.stdout)["status"] == "canceled"  # the last requester left


async def test_a_worker_with_kinds_writes_the_settings_of_those_it_runs_only(dsn, pool, queue):
    """`jobfeed worker --kinds typed` on a task module that also defines
    "strict": a worker running strict wrote its settings; this one must not
    undo them, as a producer must not."""
    for kind in ("typed", "strict"):
        await queue.register_kind(kind, max_attempts=9, lease=77, backoff=(1,), priority=4, overwrite=True)
    env = {"JOBFEED_TASKS": "cli_tasks", "PYTHONPATH": path_with_tests(), "JOBFEED_LEASE": "30s"}
    ran = jobfeed(dsn, "worker", "--kinds", "typed", "--budget", "2s", "--reserve", "1s", **env)
    assert ran.returncode == 0, ran.stderr
    kinds = {r["kind"]: (r["max_attempts"], r["lease"].total_seconds(), r["priority"])
             for r in await pool.fetch("select kind, max_attempts, lease, priority from jobfeed.kinds")}
    assert kinds["typed"] == (Settings().max_attempts, 30, 0)  # the kind it runs: its own settings
    assert kinds["strict"] == (9, 77, 4)  # left as the worker that runs it wrote them
    assert "cached" in kinds  # a kind nobody had registered is still added


@pytest.mark.parametrize("args, message", [
    (["submit", "nosuchkind", "t"], "unknown_kind"),
    (["submit", "demo", ""], "invalid_target"),
    (["submit", "demo", "x" * 513], "invalid_target"),
    (["submit", "demo", "t", "--payload", "[1, 2]"], "must be a JSON object"),
    (["submit", "demo", "t", "--payload", "{not json"], "not valid JSON"),
    (["submit", "demo", "t", "--payload", '{"steps": "many"}'], "invalid_payload"),
    (["submit", "demo", "t", "--payload", json.dumps({"pad": "x" * 70000})], "payload_too_large"),
    (["show", "not-a-uuid"], "not a job id"),
    (["submit", "demo", "t", "--payload", '{"x": "\\u0000"}'], "invalid_payload"),
    (["submit", "demo", "t", "--payload", '{"x": "\\ud800"}'], "invalid_payload"),
    (["submit", "demo", "t", "--payload", '{"x": 1e400}'], "invalid_payload"),
    (["pause", "\udcff"], "invalid_input"),
])
async def test_bad_input_is_refused_and_changes_nothing(dsn, pool, args, message):
    out = jobfeed(dsn, *args)
    assert out.returncode != 0
    assert message in out.stderr and "Traceback" not in out.stderr
    assert await job_count(pool) == 0


async def test_a_validator_raising_type_error_is_a_clear_refusal(dsn, pool):
    out = jobfeed(dsn, "submit", "typed", "t", "--payload", '{"n": "many"}',
                  JOBFEED_TASKS="jobfeed.demo,cli_tasks", PYTHONPATH=path_with_tests())
    assert out.returncode == 2
    assert "invalid_payload" in out.stderr and "Traceback" not in out.stderr
    assert await job_count(pool) == 0


@pytest.mark.parametrize("payload, message", [
    ("[1]", "invalid_payload: payload must be a JSON object"),
    ('"text"', "invalid_payload: payload must be a JSON object"),
    ("null", "invalid_payload: payload must be a JSON object"),
    ("{not json", "invalid_json: the payload is not valid JSON"),
    ('{"x": NaN}', "invalid_json: the payload is not valid JSON"),
])
def test_a_bad_payload_is_refused_before_any_database(tmp_path, payload, message):
    # No DATABASE_URL: the payload is refused before jobfeed would start one.
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["JOBFEED_DATA_DIR"] = str(tmp_path)
    out = subprocess.run(JOBFEED + ["submit", "demo", "x", "--payload", payload], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == f"error: {message}" or out.stderr.startswith(f"error: {message}")
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert not any(tmp_path.iterdir())  # no database was made


def one_line(out: subprocess.CompletedProcess) -> str:
    """The one line a refused command writes on stderr."""
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    return out.stderr


@pytest.mark.parametrize("setting, value", [
    ("JOBFEED_LEASE", "soon"), ("JOBFEED_BACKOFF", "1m,,x"), ("JOBFEED_MAX_ATTEMPTS", "0"),
    ("JOBFEED_RETENTION", "-1d"), ("JOBFEED_RETENTION", "99999999999d"), ("JOBFEED_PORT", "http"),
    ("JOBFEED_BACKOFF", "1s,,2s"), ("JOBFEED_HOST", "not..a..host"), ("JOBFEED_LOG_LEVEL", "bogus"),
    ("JOBFEED_WEBHOOK_HOSTS", "http://x.com/"), ("JOBFEED_WEBHOOK_HOSTS", ",,,"), ("DATABASE_URL", "notaurl"),
    ("DATABASE_URL", "postgresql://u:s3c/ret@host/db"), ("DATABASE_URL", "postgresql://u:s3c@127.0.0.1:99999/db"),
    ("JOBFEED_MAX_ATTEMPTS", "2147483648"),
    ("JOBFEED_PORT", "70000"),
    ("JOBFEED_DATA_DIR", __file__),  # a file, not a folder
    ("JOBFEED_DATA_DIR", __file__ + "/data"),  # under a file
    # a secret that came out empty (a deploy template): as unset, submissions would be open
    ("JOBFEED_API_TOKEN", ""), ("JOBFEED_ADMIN_TOKEN", " "), ("JOBFEED_METRICS_TOKEN", ""),
    ("JOBFEED_WEBHOOK_SECRET", ""),
    # nor a database URL: as unset, the command would run on an embedded server of its own
    ("DATABASE_URL", ""),
    ("JOBFEED_CORS_ORIGINS", "not a url"), ("JOBFEED_CORS_ORIGINS", "https://a.example.com/path"),
    # shorter than the database's intervals hold, or than the heartbeat renews in time
    ("JOBFEED_LEASE", "0.0000001s"), ("JOBFEED_LEASE", "0.4ms"), ("JOBFEED_LEASE", "149ms"),
    ("JOBFEED_BACKOFF", "1s,0.0000001s"), ("JOBFEED_RETENTION", "0.5ms"),
    ("JOBFEED_DIRECT_URL", "notaurl"), ("JOBFEED_DIRECT_URL", "postgresql://u:s3c@127.0.0.1:99999/db"),
])
async def test_a_bad_setting_is_refused_at_start_naming_it(dsn, pool, setting, value):
    out = jobfeed(dsn, "submit", "demo", "t", **{setting: value})
    assert out.returncode == 2
    assert setting in one_line(out) and "s3c" not in out.stderr
    assert await job_count(pool) == 0


@pytest.mark.parametrize("args, flag", [
    (["--log-level", "bogus", "sweeper", "--once"], "--log-level"),
    (["api", "--host", "not..a..host"], "--host"),
    (["api", "--port", "70000"], "--port"),
    (["up", "--port", "-1"], "--port"),
])
async def test_a_bad_flag_is_refused_naming_it(dsn, args, flag):
    out = jobfeed(dsn, *args)
    assert out.returncode == 2
    assert flag in out.stderr and "Traceback" not in out.stderr


UNREACHABLE = "postgresql://postgres:s3cret@127.0.0.1:1/jobfeed"


def test_a_direct_url_needs_the_poolers_beside_it():
    with pytest.raises(SettingError, match="JOBFEED_DIRECT_URL: set it beside DATABASE_URL"):
        Settings.from_env({"JOBFEED_DIRECT_URL": "postgresql://db/app"})
    assert Settings.from_env({"DATABASE_URL": "postgresql://pooler/app",
                              "JOBFEED_DIRECT_URL": "postgresql://db/app"}).direct_url == "postgresql://db/app"


async def test_a_direct_url_turns_the_statement_cache_off_for_the_poolers_url_only(monkeypatch):
    monkeypatch.setattr(db, "_DIRECT", {})
    pooler, server = "postgresql://pooler/app", "postgresql://db/app"
    assert await db.resolve_dsn(Settings(database_url=pooler, direct_url=server)) == pooler
    assert (db.direct(pooler), db._statement_cache(pooler)) == (server, 0)
    assert (db.direct(server), db._statement_cache(server)) == (server, db.STATEMENT_CACHE)
    # the same URL twice names no pooler: its connections keep their statements
    assert await db.resolve_dsn(Settings(database_url=server, direct_url=server)) == server
    assert (db.direct(server), db._statement_cache(server)) == (server, db.STATEMENT_CACHE)


@pytest.mark.parametrize("args", [["worker"], ["migrate"], ["submit", "demo", "t"]])
async def test_an_unreachable_direct_url_is_one_line_naming_it(dsn, pool, args):
    out = jobfeed(dsn, *args, JOBFEED_DIRECT_URL=UNREACHABLE)
    assert out.returncode == 3
    line = one_line(out)
    assert "JOBFEED_DIRECT_URL: cannot connect to postgresql://postgres:***@127.0.0.1:1/jobfeed" in line
    assert "s3cret" not in line
    assert await job_count(pool) == 0


@pytest.mark.parametrize("args", [["worker"], ["migrate"], ["sweeper", "--once"]])
async def test_a_direct_url_to_another_database_is_refused_naming_it(dsn, pool, args):
    """Its listeners would hear nothing of the jobs written through DATABASE_URL,
    and a migration would go to the other database: refused at start, before
    any of it."""
    other = f"direct_other_{uuid.uuid4().hex[:8]}"
    await pool.execute(f"create database {other}")
    try:
        parts = urllib.parse.urlsplit(dsn)
        out = jobfeed(dsn, *args, JOBFEED_DIRECT_URL=parts._replace(path=f"/{other}").geturl())
        assert out.returncode == 2, out.stderr
        line = one_line(out)
        assert f"JOBFEED_DIRECT_URL: reaches database '{other}', not the one DATABASE_URL reaches" in line, line
        conn = await asyncpg.connect(parts._replace(path=f"/{other}").geturl())
        try:  # nothing migrated there
            assert await conn.fetchval("select to_regnamespace('jobfeed') is null")
        finally:
            await conn.close()
    finally:
        await pool.execute(f"drop database {other} with (force)")
ANY_ID = str(uuid.UUID(int=1))


@pytest.mark.parametrize("args", [
    ["submit", "demo", "t"], ["show", ANY_ID], ["pause", "demo"], ["resume", "demo"], ["schedules"],
    ["leave", ANY_ID], ["worker"], ["sweeper"], ["api", "--port", "0"], ["migrate"], ["up", "--port", "0"],
])
def test_an_unreachable_database_is_one_line_naming_it(tmp_path, args):
    out = jobfeed(UNREACHABLE, *args, JOBFEED_DATA_DIR=str(tmp_path), JOBFEED_ADMIN_TOKEN=ADMIN_TOKEN)
    assert out.returncode == 3
    line = one_line(out)
    assert "DATABASE_URL: cannot connect to postgresql://postgres:***@127.0.0.1:1/jobfeed" in line
    assert "s3cret" not in line


async def test_a_database_that_does_not_exist_is_one_line_naming_it(dsn):
    out = jobfeed(db.with_database(dsn, "no_such_database"), "submit", "demo", "t")
    assert out.returncode == 3
    assert "DATABASE_URL" in one_line(out) and 'database "no_such_database" does not exist' in out.stderr


@pytest.mark.parametrize("args", [["worker"], ["api", "--port", "0"]])
async def test_a_missing_tasks_module_is_named(dsn, args):
    out = jobfeed(dsn, *args, JOBFEED_TASKS="jobfeed.demo,no.such.module")
    assert out.returncode == 2
    assert "JOBFEED_TASKS: no module named 'no.such.module'" in one_line(out)


async def test_a_tasks_module_that_fails_to_import_says_what_and_where(dsn, tmp_path):
    (tmp_path / "broken_tasks.py").write_text("import os\nraise RuntimeError('boom')\n")
    out = jobfeed(dsn, "worker", JOBFEED_TASKS="broken_tasks", PYTHONPATH=f"{tmp_path}{os.pathsep}{path_with_tests()}")
    assert out.returncode == 2
    assert "JOBFEED_TASKS: importing broken_tasks failed: RuntimeError: boom" in one_line(out)
    assert f"{tmp_path / 'broken_tasks.py'}:2" in out.stderr


@pytest.mark.parametrize("option", ['schedule="0 * * * *", timezone="Mars/Base"', 'every="0s"',
                                    'schedule="61 * * * *"', 'rate="1/0s"'])
async def test_a_bad_task_option_names_the_task_modules_line(dsn, tmp_path, option):
    """Before: a bad schedule, timezone or every named jobfeed's own
    worker/schedules.py, where the check is, not the user's @task line."""
    (tmp_path / "bad_tasks.py").write_text(
        f"from jobfeed import task\n\n\n@task('bad.option', {option})\nasync def handle(job, ctx):\n    pass\n")
    out = jobfeed(dsn, "worker", JOBFEED_TASKS="bad_tasks", PYTHONPATH=f"{tmp_path}{os.pathsep}{path_with_tests()}")
    assert out.returncode == 2
    assert f"(at {tmp_path / 'bad_tasks.py'}:4)" in one_line(out), out.stderr


@pytest.mark.parametrize("processes", ["1", "2"])
async def test_a_worker_with_no_kinds_says_to_set_jobfeed_tasks(dsn, processes):
    out = jobfeed(dsn, "worker", "--processes", processes, JOBFEED_TASKS="")
    assert out.returncode == 2
    assert "no kinds to run: set JOBFEED_TASKS" in one_line(out)


async def test_top_without_a_terminal_prints_the_view_once(dsn, queue, pool, demo_kind):
    """Before: it refused (exit 2). A pipe, a file, cron or `watch` now get one
    view, as `top -b -n 1` gives, and the command exits."""
    for i in range(3):
        await queue.submit("demo", f"once-{i}")
    await pool.execute("select jobfeed.worker_beat('w-once:1', 'once-host', array['demo'], 8, 2, '1 minute')")
    out = subprocess.run(JOBFEED + ["top"], env=worker_env(dsn), stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("jobfeed top   as of ") and "q quits" not in out.stdout
    (demo,) = [line for line in lines if line.startswith("demo ")]
    assert demo.split()[2] == "3"  # the QUEUED column, as the database has it
    assert "1 live, 0 lost" in out.stdout and "w-once:1" in out.stdout and "2/8" in out.stdout


async def test_follow_shows_progress_and_exits_by_outcome(dsn, pool):
    worker = subprocess.Popen(JOBFEED + ["worker", "--kinds", "demo"], env=worker_env(dsn),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ok = jobfeed(dsn, "submit", "demo", "ok", "--follow",
                     "--payload", '{"steps": 3, "step_ms": 20, "fail": ["transient"]}')
        assert ok.returncode == 0, ok.stderr
        lines = ok.stderr.splitlines()
        assert "100% completed" in lines[-1]
        assert any("step 1 of 3" in line for line in lines)
        # retries are invisible: the bar never says failed or queued after processing
        assert not any("failed" in line for line in lines)
        bad = jobfeed(dsn, "submit", "demo", "bad", "--follow", "--json", "--payload", '{"fail": ["permanent"]}')
        assert bad.returncode == 1
        view = json.loads(bad.stdout)
        assert view["status"] == "failed" and view["error"]["code"] == "demo_permanent"
    finally:
        worker.kill()
        worker.wait()


async def test_show_prints_the_admin_view(dsn, queue, pool, demo_kind):
    job_id = (await queue.submit("demo", "t2", {"steps": 1})).id
    [job] = await queue.claim(["demo"], 1, "w-test")
    await queue.fail_transient(job.id, job.generation, "http_503", "upstream down")
    out = jobfeed(dsn, "show", str(job_id), "--json")
    assert out.returncode == 0, out.stderr
    view = json.loads(out.stdout)
    assert view["state"] == "queued" and view["status"] == "processing"
    assert view["last_error"] == {"code": "http_503", "message": "upstream down"}
    assert view["attempts_log"][0]["worker_id"] == "w-test"
    human = jobfeed(dsn, "show", str(job_id))
    assert "http_503" in human.stdout and "w-test" in human.stdout
    missing = jobfeed(dsn, "show", str(uuid.uuid4()))
    assert missing.returncode == 1 and "not_found" in missing.stderr
    # a target is whoever submitted it: its escape sequences and newlines are shown, not sent
    forged = (await queue.submit("demo", "evil\x1b]0;pwned\x07\x1b[2J\n       state: completed\u202e")).id
    human = jobfeed(dsn, "show", str(forged))
    assert human.returncode == 0, human.stderr
    assert "\x1b" not in human.stdout and "\x07" not in human.stdout and "\u202e" not in human.stdout
    assert "target: evil\\x1b]0;pwned\\x07\\x1b[2J\\n       state: completed\\u202e\n" in human.stdout
    assert [line.split()[-1] for line in human.stdout.splitlines() if line.strip().startswith("state:")] == ["queued"]


def test_follow_shows_a_progress_message_escaped():
    """The handler's message (which may echo a payload) never drives the terminal."""
    from jobfeed.worker.follow import render
    line = render({"status": "processing", "progress": {"done": 1, "total": 2, "message": "a\x1b[2J\rb"}})
    assert line.endswith("processing - a\\x1b[2J\\rb") and "\x1b" not in line and "\r" not in line


async def test_migrate_reports_up_to_date(dsn):
    out = jobfeed(dsn, "migrate")
    assert out.returncode == 0 and "up to date" in out.stdout


async def test_api_serves_on_the_given_port(dsn):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = await Process(JOBFEED + ["api", "--port", str(port)], worker_env(dsn, JOBFEED_ADMIN_TOKEN=ADMIN_TOKEN)) \
        .start(ready=r"Uvicorn running on (http://127\.0\.0\.1:\d+)")
    try:
        assert proc.match.group(1) == f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=proc.match.group(1), timeout=10) as client:
            assert (await client.get("/readyz")).status_code == 200
    finally:
        await proc.stop(timeout=15)


async def test_the_api_process_settles_its_collector_once_serving(dsn):
    """`jobfeed api` freezes what it has built and collects the youngest
    generation every GC_YOUNG allocations (gc_tasks' kind refuses every payload,
    saying how the collector is set)."""
    env = worker_env(dsn, JOBFEED_ADMIN_TOKEN=ADMIN_TOKEN, JOBFEED_TASKS="jobfeed.demo,gc_tasks",
                     PYTHONPATH=path_with_tests())
    proc = await Process(JOBFEED + ["api", "--port", "0"], env).start(ready=r"Uvicorn running on (http://\S+)")
    try:
        async with httpx.AsyncClient(base_url=proc.match.group(1), timeout=10) as client:
            answer = await client.post("/api/jobs", json={"kind": "gcreport", "target": "t"})
    finally:
        await proc.stop(timeout=15)
    found = re.search(r"gc young=(\d+) frozen=(\d+)", answer.text)
    assert answer.status_code == 422 and found, answer.text
    assert int(found.group(1)) == GC_YOUNG and int(found.group(2)) > 0


@pytest.mark.parametrize("command", [["up", "--grace", "1s"], ["api"]])
def test_a_taken_port_says_so_in_one_line(dsn, command):
    """Before, for `jobfeed api`: uvicorn's log line, and exit 3 (the code for
    an unreachable database)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        out = jobfeed(dsn, *command, "--port", str(taken.getsockname()[1]))
    assert out.returncode == 2, out.stderr
    assert "could not listen on 127.0.0.1:" in out.stderr and "Traceback" not in out.stderr


def test_up_on_a_taken_port_fails_before_it_touches_the_database():
    """Before, a second `jobfeed up` started (or reached) its database,
    migrated it and started a worker, then failed to bind. Here the database
    is unreachable, so reaching for it would fail otherwise (exit 3)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        out = jobfeed("postgresql://jobfeed@127.0.0.1:9/none", "up", "--port", str(taken.getsockname()[1]),
                      timeout=30)
    assert out.returncode == 2, out.stderr
    assert "could not listen on 127.0.0.1:" in out.stderr and "database" not in out.stderr.lower()


def test_api_on_a_host_that_does_not_resolve_names_the_setting(dsn):
    out = jobfeed(dsn, "api", "--host", "not_a_host.invalid")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [out.stderr.strip()] and "JOBFEED_HOST 'not_a_host.invalid'" in out.stderr


async def test_leave_a_request(dsn, pool, queue, demo_kind):
    s = await queue.submit("demo", "left", request=True)
    out = jobfeed(dsn, "leave", str(s.request_id), "--json")
    assert out.returncode == 0, out.stderr
    view = json.loads(out.stdout)
    assert (view["id"], view["status"], view["requesters"]) == (str(s.id), "canceled", 0)
    again = jobfeed(dsn, "leave", str(s.request_id))
    assert again.returncode == 0 and "canceled" in again.stdout
    for bad, message, code in ((str(uuid.uuid4()), "not_found", 1), ("nope", "not a request id", 2)):
        out = jobfeed(dsn, "leave", bad)
        assert out.returncode == code and message in one_line(out)


@pytest.mark.parametrize("args", [["schedules"], ["show", "--json", "{id}"], ["show", "{id}"]])
async def test_a_reader_that_leaves_early_gets_no_traceback(dsn, pool, args):
    """`jobfeed show ID | head -1`: the pipe closed before all was written
    ended in a BrokenPipeError traceback and exit 1 (a failed job's code)."""
    job_id = jobfeed(dsn, "submit", "demo", "piped").stdout.strip()
    proc = subprocess.Popen(JOBFEED + [a.format(id=job_id) for a in args], env=worker_env(dsn),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # before it writes anything
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert proc.returncode in (0, 141)
