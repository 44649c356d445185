"""What a fault run's database says, read the same way for every system: the
completion rate before and after the fault, and per job whether it was lost,
or ran more than once and why."""

from __future__ import annotations

import sys

from .fault_workers import Sizes, Worker, connect_retrying
from .systems import ROOT, System

RECOVERED = 0.95  # of the baseline rate
KILL_SLACK = 0.1  # s: a record's commit can land just after the kill signal was sent
# Where the jobs that did not complete stand, in each system's own words.
UNFINISHED = {
    "jobfeed": "select state::text, count(*) from jobfeed.jobs where state <> 'completed' group by 1",
    "pgqueuer": "select status::text, count(*) from pgqueuer group by 1",
    "procrastinate": "select status::text, count(*) from procrastinate_jobs where status <> 'succeeded' group by 1",
}


async def first_runs(url: str, since: float) -> list[float]:
    """Epoch of each job's first recorded run, from `since`, in order."""
    conn = await connect_retrying(url)
    try:
        rows = await conn.fetch("""
            select extract(epoch from min(at))::float8 as t from bench_runs
             group by key having min(at) >= to_timestamp($1) order by 1""", since)
        return [r["t"] for r in rows]
    finally:
        await conn.close()


def rate(times: list[float], start: float, end: float) -> float:
    if end <= start:
        return 0.0
    return sum(1 for t in times if start <= t < end) / (end - start)


def recovery(times: list[float], base: tuple[float, float], fault_end: float, sizes: Sizes) -> dict:
    before = rate(times, *base)
    w0 = fault_end + 2 * sizes.lease
    after = rate(times, w0, w0 + sizes.window)
    recovered_at = None
    span = min(2.0, sizes.window)  # the rate is judged over this much time from each instant
    t = fault_end
    while t + span <= w0 + sizes.window + 1e-6:
        if before and rate(times, t, t + span) >= RECOVERED * before:
            recovered_at = t - fault_end
            break
        t += 0.25
    return {"rate_before": round(before, 1), "rate_after": round(after, 1),
            "recovery_pct": round(100 * after / before, 1) if before else None,
            "time_to_recover_s": round(recovered_at, 2) if recovered_at is not None else None}


def record_table() -> str:
    sys.path.insert(0, str(ROOT / "bench" / "peers"))
    from record import TABLE
    return TABLE


def killed_pids(workers: list[Worker]) -> dict[int, float]:
    return {pid: t for w in workers for pid, t in w.killed.items()}


async def accounting(url: str, system: System, n: int, killed: dict[int, float], lease: float) -> dict:
    """Per job, from the database. A job that ran to its end more than once is
    `twice`, unless each earlier run was made by a worker killed (-9) after it:
    such a worker died before it could record the completion, and every queue
    must run the job again (`rerun_after_kill`, at-least-once)."""
    conn = await connect_retrying(url)
    try:
        completed = await conn.fetchval(system.completed_sql)
        recorded = await conn.fetchval("select count(distinct key) from bench_runs")
        runs = await conn.fetchval("select count(*) from bench_runs")
        unfinished = {r[0]: r[1] for r in await conn.fetch(UNFINISHED[system.name])}
        doubled = await conn.fetch("""
            select key, array_agg(pid order by at) as pids, array_agg(extract(epoch from at)::float8 order by at) as ats
              from bench_runs group by key having count(*) > 1""")
    finally:
        await conn.close()
    out = {"completed": completed, "recorded": recorded, "lost": n - completed, "never_ran": n - recorded,
           "extra_runs": runs - recorded, "unfinished": unfinished, "killed_pids": {str(p): round(t, 3) for p, t in killed.items()}}
    out.update(classify([(r["key"], list(zip(r["pids"], r["ats"]))) for r in doubled], killed, lease))
    return out


def classify(doubled: list[tuple[int, list[tuple[int, float]]]], killed: dict[int, float], lease: float) -> dict:
    """Jobs run more than once (key, [(pid, at), ...] in order) -> how many are
    real doubles, how many re-runs after a kill: every earlier run was made by a
    worker killed within a lease after it (a completion is written within
    milliseconds; one still unwritten a lease later was lost another way)."""
    twice = after_kill = 0
    examples = []
    for key, runs in doubled:
        if all(pid in killed and at - KILL_SLACK <= killed[pid] <= at + lease for pid, at in runs[:-1]):
            after_kill += 1
        else:
            twice += 1
            if len(examples) < 5:
                examples.append({"key": key, "runs": [[pid, round(at, 3)] for pid, at in runs]})
    return {"twice": twice, "rerun_after_kill": after_kill, "twice_examples": examples}
