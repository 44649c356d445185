"""The fault bench must keep running and counting right: every fault once on
jobfeed, at tiny sizes, through the same command as a full run (`python -m
bench faults --quick`). No speed is asserted: the figures of a quick run mean
nothing, and whether jobfeed meets its targets is what the full run reports."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.fault_accounting import classify, recovery  # noqa: E402
from bench.fault_workers import QUICK  # noqa: E402
from bench.faults import SCENARIOS  # noqa: E402


@pytest.mark.timeout(150)
def test_every_fault_runs_on_jobfeed_and_no_job_is_lost(tmp_path):
    out = tmp_path / "faults.json"
    proc = subprocess.run([sys.executable, "-m", "bench", "faults", "--quick", "--systems", "jobfeed",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=140)
    assert out.exists(), proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert proc.returncode == 0 and result["ok"], (proc.stdout[-3000:], proc.stderr[-4000:])
    assert list(result["scenarios"]) == list(SCENARIOS)
    for scenario, row in result["scenarios"].items():
        v = row["jobfeed"]
        # Every job loaded completed, by the queue's count and by the runs the handlers recorded.
        assert v["lost"] == 0 and v["completed"] == v["recorded"] == v["jobs"] > 0, (scenario, v)
        assert v["never_ran"] == 0 and v["rate_before"] > 0, (scenario, v)
        assert v["extra_runs"] >= v["twice"] + v["rerun_after_kill"], (scenario, v)
    r = {name: row["jobfeed"] for name, row in result["scenarios"].items()}
    # Each fault happened.
    assert r["crash"]["kills"] == 1 and r["crash"]["restarts"] >= 1
    assert r["kills"]["kills"] == QUICK.kills and r["kills"]["restarts"] >= QUICK.kills
    assert r["restart"]["fault"]["restart_seconds"] > 0
    assert r["terminate"]["fault"]["terminated"] >= QUICK.workers  # at least each worker's listener
    assert r["exhaust"]["fault"]["slots_taken"] > 0 and r["exhaust"]["fault"]["terminated"] >= QUICK.workers
    # The worker logs were read.
    assert all("deadlock_lines" in v["logs"] for v in r.values())


def test_recovery_is_the_rate_two_leases_after_the_fault_over_the_rate_before():
    sizes = dataclasses.replace(QUICK, lease=3.0, window=6.0)   # judged over [16 s, 22 s)
    before = [i / 100 for i in range(0, 1000)]                 # 100/s for 10 s
    after = [12 + i / 50 for i in range(0, 500)]               # nothing for 2 s, then 50/s
    got = recovery(before + after, (0.0, 10.0), 10.0, sizes)
    assert got["rate_before"] == 100 and got["rate_after"] == 50 and got["recovery_pct"] == 50
    assert got["time_to_recover_s"] is None  # never back to 95 %
    back = [12 + i / 100 for i in range(0, 1000)]
    got = recovery(before + back, (0.0, 10.0), 10.0, sizes)
    assert got["recovery_pct"] == 100 and got["time_to_recover_s"] == 2.0


def test_a_rerun_counts_as_a_double_unless_the_earlier_run_s_worker_was_killed_just_after_it():
    killed = {7: 100.0}
    doubled = [
        (1, [(7, 99.0), (8, 103.0)]),    # ran on 7, 7 killed before completing: a forced re-run
        (2, [(7, 101.0), (8, 103.0)]),   # recorded by 7 a second after 7's kill (a reused pid?): a double
        (5, [(7, 100.05), (8, 103.0)]),  # its commit landed as the signal was on its way: a forced re-run
        (3, [(8, 50.0), (8, 53.0)]),     # the same living worker ran it twice: a double
        (4, [(7, 90.0), (8, 93.0)]),     # 7 was killed, but 10 s (> a lease) later: its completion was lost
    ]
    got = classify(doubled, killed, lease=3.0)
    assert (got["twice"], got["rerun_after_kill"]) == (3, 2)
    assert [e["key"] for e in got["twice_examples"]] == [2, 3, 4]
