"""The README's examples run as written, against the test database.

Python blocks: a block whose first line names a file (`# myapp/jobs.py, ...`)
is written there, in a fresh folder that is then on the import path; every
block is then run as a script, in README order, with DATABASE_URL set and no
worker running (producers come first). A block that says to run it with
`uvicorn X:app` is also served and asked for its pages.

Shell blocks that talk to a running jobfeed (curl on localhost:8000, `jobfeed
submit`/`show`) run in bash -e against a real API and worker, localhost:8000
pointing at them. The others install, start `jobfeed up` or run the benchmark:
the rest of the suite covers those (test_up.py, test_bench.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from conftest import JOBFEED, worker_env
from servers import ADMIN_TOKEN, ROOT, Process, api_env, start_api_process

README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)
FILE_HEADER = re.compile(r"#\s*([\w/]+\.py)\b")


def blocks(*languages: str) -> list[tuple[int, str]]:
    """(line number, code) of the README's blocks in these languages."""
    return [(README.count("\n", 0, m.start()) + 1, m.group(2)) for m in BLOCK.finditer(README)
            if m.group(1) in languages]


PYTHON = blocks("python")
SHELL = [(line, code) for line, code in blocks("sh", "bash")
         if "localhost:8000" in code or re.search(r"jobfeed (submit|show)\b", code)]


def test_the_readme_has_the_examples_this_file_runs():
    assert len(PYTHON) >= 3 and len(SHELL) >= 2  # a README rewrite must not silently skip them
    assert any("myapp/jobs.py" in code.splitlines()[0] for _, code in PYTHON)


def write_files(folder: Path) -> list[tuple[int, Path]]:
    """Every Python block as a file: where its first line says, else block_<line>.py."""
    files = []
    for line, code in PYTHON:
        named = FILE_HEADER.match(code.splitlines()[0])
        path = folder / (named.group(1) if named else f"block_{line}.py")
        path.parent.mkdir(parents=True, exist_ok=True)
        for package in path.relative_to(folder).parents:
            if package != Path("."):
                (folder / package / "__init__.py").touch()
        path.write_text(code)
        files.append((line, path))
    return files


def run_env(dsn: str, folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBFEED_")}
    env.update(DATABASE_URL=dsn, PYTHONPATH=str(folder), JOBFEED_ADMIN_TOKEN=ADMIN_TOKEN)
    return env


async def test_every_python_example_runs_as_written(dsn, pool, tmp_path):
    files = write_files(tmp_path)
    for line, path in files:
        done = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=run_env(dsn, tmp_path),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"README.md:{line} ({path.name}) failed:\n{done.stderr}"
    # The producer submitted before any worker had run: its kinds came from the task module.
    kinds = {r["kind"]: r["max_attempts"] for r in await pool.fetch("select kind, max_attempts from jobfeed.kinds")}
    assert (kinds.get("fetch_email"), kinds.get("send_receipt")) == (5, 3)
    targets = {r["target"] for r in await pool.fetch("select target from jobfeed.jobs")}
    assert {"msg-42", "msg-43", "msg-44", "order-1"} <= targets


async def test_the_host_app_example_serves_jobfeed_under_its_prefix(dsn, tmp_path):
    files = write_files(tmp_path)
    served = [(path, m.group(1)) for _, path in files
              if (m := re.search(r"uvicorn (\w+:\w+)", path.read_text().splitlines()[0]))]
    assert served, "the embedding example says how to run it"
    for path, target in served:
        proc = Process([sys.executable, "-m", "uvicorn", target, "--app-dir", str(path.parent),
                        "--host", "127.0.0.1", "--port", "0"], run_env(dsn, tmp_path))
        await proc.start(ready=r"Uvicorn running on (http://127\.0\.0\.1:\d+)")
        async with proc, httpx.AsyncClient(base_url=proc.match.group(1)) as client:
            assert (await client.get("/")).status_code == 200
            page = await client.get("/jobs/")
            assert page.status_code == 200 and "Submit a job" in page.text
            assert (await client.get("/jobs/static/js/jobfeed.js")).status_code == 200
            made = await client.post("/jobs/api/jobs", json={"kind": "nope", "target": "t"})
            assert made.status_code == 422 and made.json()["error"]["code"] == "unknown_kind"


@pytest.fixture
async def jobfeed_server(dsn):
    """An API and a worker, as `jobfeed up` would run them (short retry delays)."""
    api, url = await start_api_process(dsn)
    worker = Process(JOBFEED + ["worker", "--grace", "500ms"], worker_env(dsn))
    try:
        await worker.start(ready=r"kinds demo")
        yield url
    finally:
        await worker.stop(timeout=5)
        await api.stop()


@pytest.mark.parametrize("line, code", SHELL, ids=[f"README.md:{line}" for line, _ in SHELL])
async def test_shell_examples_run_against_a_running_jobfeed(jobfeed_server, dsn, line, code):
    port = jobfeed_server.rsplit(":", 1)[1]
    script = (code.replace("localhost:8000", f"127.0.0.1:{port}")
              .replace(".venv/bin/jobfeed", " ".join(JOBFEED)))
    env = dict(api_env(dsn), TOKEN=ADMIN_TOKEN)
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, f"README.md:{line} failed:\n{done.stdout}\n{done.stderr}"
    if "events" in code:
        assert "completed" in done.stdout and "demo_permanent" in done.stdout, done.stdout
