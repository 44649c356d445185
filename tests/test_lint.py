"""ruff and mypy, configured in pyproject.toml, find nothing (fast tier: no
database). mypy checks the package as it is installed, `jobfeed`; the
repository's top is that package, which an editable install maps with an
import hook mypy cannot follow, so mypy gets a folder holding a `jobfeed`
link to the checkout on MYPYPATH instead (works on a fresh clone too)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _package_link() -> Path:
    """A folder outside the checkout, one per checkout and kept between runs
    (mypy's cache lives there too), holding jobfeed -> the checkout."""
    home = Path(tempfile.gettempdir()) / f"jobfeed-mypy-{hashlib.sha1(str(ROOT).encode()).hexdigest()[:12]}"
    home.mkdir(exist_ok=True)
    link = home / "jobfeed"
    if not (link.is_symlink() and link.resolve() == ROOT):
        spare = home / f"jobfeed.{os.getpid()}"
        spare.unlink(missing_ok=True)
        spare.symlink_to(ROOT, target_is_directory=True)
        spare.replace(link)  # atomic: a parallel run sees the old link or the new one
    return home


def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300, **kwargs)


def test_ruff_finds_nothing():
    out = run("ruff", "check", "--no-cache", str(ROOT), cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_finds_nothing():
    home = _package_link()
    out = run("mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(home / "cache"),
              "-p", "jobfeed", cwd=home, env={**os.environ, "MYPYPATH": str(home)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success" in out.stdout


USER_MODULE = '''
from jobfeed import Context, Job, Permanent, task


@task("fetch", max_attempts=3, on_duplicate="rerun", dedupe="requester", on_abandon="keep")
async def fetch(job: Job, ctx: Context) -> dict[str, int]:
    if not job.payload:
        raise Permanent("empty", "no payload")
    return {"n": 1}


async def direct(job: Job, ctx: Context) -> None:
    kept: dict[str, int] = await fetch(job, ctx)  # @task hands back the handler, typed as it was
    del kept


@task("misspelt", on_duplicate="rejoin")
async def misspelt(job: Job, ctx: Context) -> None:
    return None
'''


def test_a_users_handlers_type_check_strictly(tmp_path):
    """A user's module under mypy --strict: @task keeps the handler's type
    (it returned Any: an untyped-decorator error at every handler) and a
    misspelt choice is caught before any worker starts."""
    home = _package_link()
    (tmp_path / "user_tasks.py").write_text(USER_MODULE)
    out = run("mypy", "--strict", "--follow-imports=silent", "--cache-dir", str(home / "cache-user"),
              str(tmp_path / "user_tasks.py"), cwd=tmp_path, env={**os.environ, "MYPYPATH": str(home)})
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and '"on_duplicate"' in errors[0] and "rejoin" in errors[0], out.stdout + out.stderr
