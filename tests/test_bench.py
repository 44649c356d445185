"""The benchmarks must keep running and counting right: every scenario once, at
tiny sizes, through the same command as a full run (`python -m bench --quick`).
Nothing here is about speed: no timing is asserted.

jobfeed and the raw baseline always run. The peers (pgqueuer, procrastinate)
need virtual environments of their own (bench/.peers, made by a full
`python -m bench`): under CI=true the test makes them (PyPI is reachable there);
elsewhere, without them, it skips rather than download on every run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.history import CLAIM_MORE  # noqa: E402
from bench.run import QUICK  # noqa: E402
from bench.systems import ALL  # noqa: E402

pytestmark = pytest.mark.full  # starts its own PostgreSQL


def run_bench(tmp_path: Path, *args: str, timeout: float = 290) -> dict:
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--out", str(out), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert out.exists(), proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-4000:])
    return result


def check_queue_scenarios(q: dict, systems: list[str]) -> None:
    for name in systems:
        for mode in ("single", "batch"):
            enq = q["enqueue"][name][mode]
            assert enq["n"] == QUICK.enqueue_n and enq["queued_in_db"] == QUICK.enqueue_n, (name, enq)
        drain = q["drain"][name]
        assert drain["completed_in_db"] == QUICK.drain_n and drain["seconds"] > 0, (name, drain)
        lat = q["latency"][name]
        expected = int(QUICK.latency_rate * QUICK.latency_seconds)
        assert lat["n"] == lat["completed_in_db"] == lat["matched"] == expected, (name, lat)
        assert lat["p50_ms"] is not None and lat["p99_ms"] >= lat["p50_ms"], (name, lat)


@pytest.mark.timeout(300)
def test_every_scenario_runs_and_counts_right(tmp_path):
    result = run_bench(tmp_path, "--systems", "jobfeed,raw")
    q = result["scenarios"]
    assert result["ok"] and result["quick"]
    check_queue_scenarios(q, ["jobfeed", "raw"])
    # two worker processes each: jobfeed's own flag, two driver commands for raw
    for name in ("jobfeed", "raw"):
        assert q["drain2"][name]["completed_in_db"] == QUICK.drain_n and q["drain2"][name]["processes"] == 2
    assert q["drain2"]["jobfeed"]["settings"]["processes"] == "2"
    assert len(q["drain2"]["raw"]["worker_exit"]) == 2

    http = q["http"]
    assert http["jobfeed_new"]["requests"] > 0 and set(http["jobfeed_new"]["statuses"]) == {"201"}
    assert http["jobfeed_new"]["created_in_db"] >= http["jobfeed_new"]["requests"]
    assert set(http["jobfeed_dup"]["statuses"]) == {"200"} and http["jobfeed_dup"]["new_jobs_in_db"] == 0
    assert http["bare"]["requests"] > 0 and set(http["bare"]["statuses"]) == {"201"}
    assert http["naive_new"]["requests"] > 0 and set(http["naive_new"]["statuses"]) == {"201"}
    assert http["naive_dup"]["requests"] > 0 and set(http["naive_dup"]["statuses"]) == {"200"}

    sse = q["sse"]
    assert sse["opened"]["opened"] == QUICK.sse_watchers
    assert sse["claim_all"]["jobs"] == QUICK.sse_jobs + 1
    assert sse["claim_all"]["got"]["got"] == QUICK.sse_watchers
    assert [g["got"] for g in sse["hot_job"]["got"]] == [QUICK.sse_hot] * QUICK.sse_rounds
    assert sse["hot_job"]["samples"] == QUICK.sse_hot * QUICK.sse_rounds
    assert sse["complete_all"]["streams_ended"] == QUICK.sse_watchers
    assert sse["bare"]["opened"]["opened"] == QUICK.sse_watchers
    assert sse["bare"]["published_to"] == sse["bare"]["got"]["got"] == QUICK.sse_watchers
    assert sse["bare"]["p99_ms"] is not None
    assert sse["memory"]["bytes_per_stream"] is not None

    depth = q["depth"]
    assert depth["base"]["due"] == QUICK.depth_base and depth["deep"]["due"] == QUICK.depth_deep
    assert depth["future"]["future"] == QUICK.depth_future
    for case in (depth["base"], depth["deep"], depth["future"]):
        assert case["completed_in_db"] >= QUICK.depth_drain and case["rate"] > 0, case
    assert depth["ok"]

    keys = q["keys"]  # the capped claim path drains all, keys and all
    assert keys["ok"] and keys["capped"]["keys"] == QUICK.keys_keys
    for case in ("uncapped", "capped"):
        assert keys[case]["completed_in_db"] == QUICK.keys_n and keys[case]["rate"] > 0, keys

    hist = q["history"]
    assert hist["ok"] and hist["history_n"] == QUICK.history_n
    for case in ("empty", "history"):
        assert hist[case]["submit"]["rate"] > 0 and hist[case]["claim"]["n"] == (1 + CLAIM_MORE) * QUICK.history_submit
        assert hist[case]["drain"]["left"] == 0 and hist[case]["drain"]["rate"] > 0
    assert 0 < hist["sweeping"]["deleted_by_end"] <= QUICK.history_expired
    assert hist["sweeping"]["drain"]["ok"] and hist["sweeping"]["latency"]["ok"]

    # Every target has its figure, except those that need pgqueuer.
    verdicts = {t["target"]: t["verdict"] for t in result["targets"]}
    missing = [name for name, v in verdicts.items() if v == "n/a"]
    assert missing and all("pgqueuer" in name for name in missing), missing
    assert len(verdicts) - len(missing) >= 13


@pytest.mark.timeout(420)
def test_peer_drivers_run_and_count_right(tmp_path):
    peers = ["pgqueuer", "procrastinate"]
    absent = [p for p in peers if not ALL[p].installed()]
    if absent and os.environ.get("CI") == "true":
        for p in absent:
            ALL[p].ensure()
        absent = []
    if absent:
        pytest.skip(f"{', '.join(absent)} not installed in {ALL[absent[0]].venv.parent} "
                    "(a full `python -m bench` makes them; tests never install from the network)")
    result = run_bench(tmp_path, "--systems", ",".join(peers), "--only", "enqueue,drain,latency")
    check_queue_scenarios(result["scenarios"], peers)


def test_the_median_trial_counts_whole_and_any_wrong_count_fails():
    from bench.run import median_trial
    drains = [{"rate": 30.0, "ok": True, "seconds": 1}, {"rate": 10.0, "ok": True, "seconds": 3},
              {"rate": 20.0, "ok": True, "seconds": 2}]
    chosen = median_trial("drain", drains)
    assert (chosen["rate"], chosen["seconds"], chosen["ok"], chosen["trials"]) == (20.0, 2, True, [30.0, 10.0, 20.0])
    drains[0]["ok"] = False
    assert median_trial("drain", drains)["ok"] is False
    enqueues = [{"single": {"rate": s, "ok": True}, "batch": {"rate": b, "ok": True}, "ok": True}
                for s, b in ((1.0, 9.0), (3.0, 7.0), (2.0, 8.0))]
    chosen = median_trial("enqueue", enqueues)
    assert (chosen["single"]["rate"], chosen["batch"]["rate"], chosen["ok"]) == (2.0, 8.0, True)
    failed = median_trial("enqueue", enqueues + [{"ok": False, "error": "boom"}])
    assert failed["ok"] is False and failed["single"]["rate"] == 2.0


def test_the_costs_drain_step_measures_a_real_worker():
    """bench.costs' drain: a real worker process drains the jobs; its CPU, its
    connections' and the whole server's are read apart."""
    import asyncio

    from bench import costs, pg

    # The OS counts CPU time in 10 ms ticks: 500 jobs (~8 ms of the worker's CPU
    # on a fast machine) could read as none. 10,000 take a few tenths of a second.
    n = 10_000

    async def drain() -> dict:
        with pg.Server() as server:
            return await costs.measure_drain(server, n)

    got = asyncio.run(drain())
    assert got["n"] == n
    assert got["worker_cpu_us"] > 0 and got["worker_connections_db_cpu_us"] > 0
    assert got["server_cpu_us"] >= got["worker_connections_db_cpu_us"] and got["wall_us"] > 0


def test_the_costs_steps_include_the_sweepers_delete():
    """bench.costs' steps, the sweeper's delete among them: every completed job,
    moved past the retention, is deleted by the sweeper's call in its batches
    (the step fails otherwise), and the deletes' WAL is counted."""
    import asyncio

    from bench import costs
    from jobfeed.worker.sweeper import Sweeper

    n = 2 * Sweeper.BATCH
    got = asyncio.run(costs.measure(n, 100, 200))
    assert set(got) >= {"submit", "submit_many", "claim_complete", "sweep", "drain"}
    # two full batches, then the short one that says the sweep is done
    assert got["sweep"]["round_trips"] == 3 / n
    assert got["sweep"]["wal_bytes"] > 0 and got["sweep"]["db_cpu_us"] >= 0


def test_the_files_bench_runs(tmp_path):
    """bench.files at a tiny size: it counts the bytes both ways and reports the ratio to COPY."""
    out = tmp_path / "files.json"
    proc = subprocess.run([sys.executable, "-m", "bench.files", "--size", "4MiB", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-4000:])
    result = json.loads(out.read_text())
    assert result["size_bytes"] == 4 * 1024 * 1024
    assert result["upload_to_copy_ratio"] > 0 and result["download"]["mb_per_s"] > 0


def test_the_commit_lock_bench_measures_every_combination(tmp_path):
    """bench.commit_lock at a tiny size: a rate for each count of connections,
    with and without a NOTIFY, with and without waiting for the flush, and a
    row in its table for every commit it made."""
    out = tmp_path / "commits.json"
    proc = subprocess.run([sys.executable, "-m", "bench.commit_lock", "--commits", "40", "--connections", "1,4",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-4000:])
    result = json.loads(out.read_text())
    assert result["ok"] and result["counted"] == result["commits"] == 8 * 40
    combos = {(r["connections"], r["notify"], r["synchronous_commit"]) for r in result["rows"]}
    assert combos == {(c, n, s) for c in (1, 4) for n in (False, True) for s in (False, True)}
    assert all(r["commits_per_s"] > 0 for r in result["rows"])


def test_the_sweep_batches_bench_deletes_every_batch_both_ways():
    """bench.sweep_batches at a tiny size: both ways delete every batch in full
    and report their times."""
    proc = subprocess.run([sys.executable, "-m", "bench.sweep_batches", "--history", "3000", "--expired", "2000",
                           "--batches", "20", "--batch", "50"], cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-4000:])
    result = json.loads(proc.stdout)
    for way in ("from_the_oldest", "from_the_last_end"):
        assert result[way]["deleted"] == 1000 and result[way]["total_s"] > 0
        assert set(result[way]["batch_ms_at"]) == {"0", "2", "10"}


def test_the_claim_parts_bench_claims_one_job_per_call_in_every_variant():
    """bench.claim_parts at a tiny size: every variant, every round, reported;
    a variant whose call claims other than one job fails the run."""
    proc = subprocess.run([sys.executable, "-m", "bench.claim_parts", "--n", "250", "--rounds", "2", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-4000:])
    result = json.loads(proc.stdout)
    assert set(result) == {"claim_v3", "claim_kind_v2", "update", "raw"}
    assert all(len(medians) == 2 and all(m > 0 for m in medians) for medians in result.values())


def test_the_pings_bench_opens_every_stream_and_times_the_probe():
    """bench.pings at a tiny size: every stream open through the run, the
    probe's answers timed."""
    proc = subprocess.run([sys.executable, "-m", "bench.pings", "--streams", "60", "--ping", "1s", "--seconds", "1.5"],
                          cwd=ROOT, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-4000:])
    result = json.loads(proc.stdout)
    assert result["ok"] and result["streams"] == 60
    assert result["answers"] >= 20 and 0 < result["p50_ms"] <= result["max_ms"]
