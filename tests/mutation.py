"""The mutation check: rule-breaking edits the tests must catch.

    .venv/bin/python tests/mutation.py              # every edit, one at a time
    .venv/bin/python tests/mutation.py claim-waits  # only edits whose name contains a word
    .venv/bin/python tests/mutation.py --list       # names, files and reasons

Each edit replaces an exact text in one file of a temporary copy of the
repository (the working tree is never touched), then runs the tests that
matter against that copy, with a fresh embedded PostgreSQL and template
database migrated from the copy's own SQL (tests/conftest.py); an edit marked
before_18, on the oldest of Debian's installed servers (apt-get install
postgresql; JOBFEED_TEST_PG_BIN names another). Caught: the
tests failed. Missed: they passed. An edit whose old text is no longer in the
file (the code moved on) is reported as STALE and fails the run: fix the edit,
never drop it quietly. Before the edits, the same tests run on the unmutated
copy; if they fail, nothing else is judged.

Nothing ready-made mutates PL/pgSQL, hence the list, in tests/mutation_edits.py. Add
an edit there whenever a bug is fixed: the edit that brings the bug back. Not part of
the per-commit run (it takes minutes); docs/mutation.md records the last result.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mutation_edits import EDITS  # tests/ is on the path: this file runs as a script
from servers import oldest_server_bin

ROOT = Path(__file__).resolve().parent.parent


def copy_repository(dest: Path) -> Path:
    """The working tree (uncommitted changes included) as dest/jobfeed, importable
    as the package `jobfeed` with PYTHONPATH=dest."""
    root = dest / "jobfeed"
    shutil.copytree(ROOT, root, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", ".peers", ".pytest_cache", "node_modules",
        # caches other runs write while this one copies (a file gone mid-copy failed the whole run)
        ".hypothesis", ".mypy_cache", ".ruff_cache", ".schemathesis", "build", "results"))
    return root


def older_server_bin() -> str | None:
    """The programs of the server CI's older-server run uses, if it is older
    than 18 (on 18 a before_18 edit could never be caught); or the user's own."""
    if os.environ.get("JOBFEED_TEST_PG_BIN", "oldest") != "oldest":
        return os.environ["JOBFEED_TEST_PG_BIN"]
    oldest = oldest_server_bin()
    return oldest[1] if oldest is not None and oldest[0] < 18 else None


def run_tests(root: Path, tests: tuple[str, ...], timeout: float, server_bin: str | None = None) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=str(root.parent), PYTHONDONTWRITEBYTECODE="1")
    env.pop("JOBFEED_TEST_PG_BIN", None)
    if server_bin:
        env["JOBFEED_TEST_PG_BIN"] = server_bin
    try:
        # one process (-n 0): -x stops at the first failure, and an edit runs few tests
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider",
                               *tests], cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "timed out"
    return done.returncode, done.stdout + done.stderr


def last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def first_failure(output: str) -> str:
    for line in output.splitlines():
        if line.startswith(("FAILED tests/", "ERROR tests/")):
            return line.split(" - ")[0]
    return last_line(output)


def _syntax_error(text: str, path: Path) -> SyntaxError | None:
    try:
        compile(text, str(path), "exec")
    except SyntaxError as exc:
        return exc
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("only", nargs="*", help="run only edits whose name contains one of these words")
    parser.add_argument("--list", action="store_true", help="list the edits and exit")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per test run (default 600)")
    args = parser.parse_args()

    edits = [e for e in EDITS if not args.only or any(w in e.name for w in args.only)]
    if args.list:
        for e in edits:
            print(f"{e.name:36} {','.join(e.files):32} {e.why}")
        print(f"{len(edits)} edits")
        return 0
    if not edits:
        print("no edit matches", args.only)
        return 2

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jobfeed-mutation-") as tmp:
        base = copy_repository(Path(tmp) / "base")
        # Stale edits first: they are loud, and cost nothing to find.
        stale = [e for e in edits if e.stale(base)]
        for e in stale:
            print(f"STALE   {e.name}: {e.stale(base)}; "
                  f"update the edit to the code as it is now")
        tests = tuple(sorted({t for e in edits for t in e.tests}))
        print(f"baseline: {len(tests)} test files on the unmutated copy ...", flush=True)
        code, output = run_tests(base, tests, args.timeout * 2)
        if code != 0:
            print(output[-4000:])
            print("the tests fail without any edit: fix that first")
            return 2
        print(f"baseline: {last_line(output)}", flush=True)

        results: dict[str, list[str]] = {"caught": [], "missed": [], "stale": [e.name for e in stale],
                                          "error": []}
        for n, e in enumerate([e for e in edits if e not in stale], 1):
            work = Path(tmp) / f"m{n}"
            root = copy_repository(work)
            mutated = e.apply(root)
            invalid = [(path, exc) for path, text in mutated.items() if path.suffix == ".py"
                       for exc in [_syntax_error(text, path)] if exc is not None]
            if invalid:  # an edit that does not even compile would be "caught" by any test
                results["error"].append(e.name)
                print(f"ERROR   {e.name:36} the edit is not valid Python: {invalid[0][1]}", flush=True)
                continue
            for path, text in mutated.items():
                path.write_text(text)
            server_bin = older_server_bin() if e.before_18 else None
            if e.before_18 and server_bin is None:
                results["error"].append(e.name)
                print(f"ERROR   {e.name:36} needs a server before 18: apt-get install postgresql", flush=True)
                continue
            t0 = time.monotonic()
            code, output = run_tests(root, e.tests, args.timeout, server_bin)
            took = time.monotonic() - t0
            if code == 1 or code == -1:
                verdict = "caught"
                detail = first_failure(output) if code == 1 else "timed out"
            elif code == 0:
                verdict, detail = "missed", last_line(output)
            else:  # 2: collection error (the edit broke an import), 3-5: pytest itself
                verdict, detail = "error", f"pytest exit {code}: {last_line(output)}"
            results[verdict].append(e.name)
            print(f"{verdict.upper():7} {e.name:36} {took:5.0f}s  {detail}", flush=True)
            if verdict != "caught":
                print(f"        why it matters: {e.why}")
            shutil.rmtree(work, ignore_errors=True)

    total = len(edits)
    print(f"\n{len(results['caught'])}/{total} caught, {len(results['missed'])} missed, "
          f"{len(results['stale'])} stale, {len(results['error'])} errors "
          f"in {time.monotonic() - started:.0f}s")
    for kind in ("missed", "stale", "error"):
        if results[kind]:
            print(f"{kind}: {', '.join(results[kind])}")
    return 0 if len(results["caught"]) == total else 1


if __name__ == "__main__":
    sys.exit(main())
