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
