"""The targets of issues 4 and 14 as ratios measured in the same run, and the table."""

from __future__ import annotations


def _get(d, *path):
    for key in path:
        if not isinstance(d, dict) or key not in d or d[key] is None:
            return None
        d = d[key]
    return d


def _ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def targets(r: dict) -> list[dict]:
    """One row per target: what, value, the bound, MET/MISSED (n/a when a side did not run)."""
    q = r.get("scenarios", {})
    rows = []

    def add(name: str, value, op: str, bound: float, unit: str = "x", detail: str = "") -> None:
        if value is None:
            verdict = "n/a"
        else:
            verdict = "MET" if (value >= bound if op == ">=" else value <= bound) else "MISSED"
        rows.append({"target": name, "value": value, "op": op, "bound": bound, "unit": unit,
                     "verdict": verdict, "detail": detail})

    def vs(scenario: str, peer: str, *path: str):
        return _ratio(_get(q, scenario, "jobfeed", *path), _get(q, scenario, peer, *path))

    add("drain: jobfeed / pgqueuer", vs("drain", "pgqueuer", "rate"), ">=", 2.5)
    add("drain: jobfeed / raw", vs("drain", "raw", "rate"), ">=", 0.55)
    add("enqueue single: jobfeed / pgqueuer", vs("enqueue", "pgqueuer", "single", "rate"), ">=", 1.1)
    add("enqueue single: jobfeed / raw", vs("enqueue", "raw", "single", "rate"), ">=", 0.85)
    add("enqueue batch: jobfeed / pgqueuer", vs("enqueue", "pgqueuer", "batch", "rate"), ">=", 1.5)
    add("enqueue batch: jobfeed / raw", vs("enqueue", "raw", "batch", "rate"), ">=", 0.6)
    for p, bound_pgq in (("p50_ms", 0.8), ("p99_ms", 0.7)):
        add(f"latency {p[:3]}: jobfeed / pgqueuer", vs("latency", "pgqueuer", p), "<=", bound_pgq)
        add(f"latency {p[:3]}: jobfeed / raw", vs("latency", "raw", p), "<=", 1.25)
    http = q.get("http", {})
    add("HTTP new targets: jobfeed / naive asyncpg route",
        _ratio(_get(http, "jobfeed_new", "rate"), _get(http, "naive_new", "rate")), ">=", 2.0)
    add("HTTP duplicate targets: jobfeed / no-I/O route",
        _ratio(_get(http, "jobfeed_dup", "rate"), _get(http, "bare", "rate")), ">=", 0.6)
    sse = q.get("sse", {})
    bare_p99 = _get(sse, "bare", "p99_ms")
    add("SSE completion -> every watcher p99: jobfeed / bare broadcast",
        _ratio(_get(sse, "complete_all", "p99_ms"), bare_p99), "<=", 0.5)
    add("SSE claim -> every watcher p99: jobfeed / bare broadcast",
        _ratio(_get(sse, "claim_all", "p99_ms"), bare_p99), "<=", 0.5)
    add("SSE memory per stream: jobfeed / bare sse-starlette",
        _ratio(_get(sse, "memory", "bytes_per_stream"), _get(sse, "bare", "memory", "bytes_per_stream")), "<=", 1.1)
    hist = q.get("history", {})
    for part in ("submit", "claim", "drain"):
        add(f"history {part}: with history / empty table",
            _ratio(_get(hist, "history", part, "rate"), _get(hist, "empty", part, "rate")), ">=", 0.9)
    add("history drain while sweeping / without",
        _ratio(_get(hist, "sweeping", "drain", "rate"), _get(hist, "history", "drain", "rate")), ">=", 0.8)
    add("history latency p99 while sweeping / without",
        _ratio(_get(hist, "sweeping", "latency", "p99_ms"), _get(hist, "history", "latency", "p99_ms")), "<=", 2.0)
    depth = q.get("depth", {})
    base = _get(depth, "base", "rate")
    add(f"depth: {_get(depth, 'deep', 'due') or '?'} queued / {_get(depth, 'base', 'due') or '?'} queued",
        _ratio(_get(depth, "deep", "rate"), base), ">=", 0.8)
    add(f"depth: {_get(depth, 'future', 'future') or '?'} far-future + {_get(depth, 'base', 'due') or '?'} queued"
        f" / {_get(depth, 'base', 'due') or '?'} queued", _ratio(_get(depth, "future", "rate"), base), ">=", 0.8)
    return rows


# ---------------------------------------------------------------- text

def _n(v, digits=0, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float) and digits:
        return f"{v:,.{digits}f}{unit}"
    return f"{v:,.0f}{unit}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def text(r: dict) -> str:
    q = r.get("scenarios", {})
    out = []
    env = r.get("environment", {})
    out.append(f"jobfeed bench {r.get('date', '')} - {env.get('cpus', '?')} CPUs ({env.get('cpu', '?')}), "
               f"PostgreSQL {env.get('postgres', '?')} (embedded, default settings), Python {env.get('python', '?')}"
               f"{' - QUICK (tiny sizes, figures meaningless)' if r.get('quick') else ''}")
    if (env.get("busy_before_pct") or 0) > 15:
        out.append(f"WARNING: the machine was {env['busy_before_pct']:.0f}% busy before the run (other work): "
                   "figures are skewed; rerun on a quiet machine")
    versions = env.get("versions", {})
    if versions:
        out.append("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    out.append("")

    systems = [s for s in ("jobfeed", "pgqueuer", "procrastinate", "raw")
               if any(s in q.get(k, {}) for k in ("enqueue", "drain", "drain2", "latency"))]
    if systems:
        rows = []
        for s in systems:
            e, lt = q.get("enqueue", {}).get(s, {}), q.get("latency", {}).get(s, {})
            drains = [q.get(k, {}).get(s, {}) for k in ("drain", "drain2")]
            rows.append([s, _n(_get(e, "single", "rate")), _n(_get(e, "batch", "rate")),
                         *(_n(d.get("rate")) + ("" if d.get("ok", True) else " (COUNT WRONG)") for d in drains),
                         _n(lt.get("p50_ms"), 1), _n(lt.get("p95_ms"), 1), _n(lt.get("p99_ms"), 1)])
        sizes = r.get("sizes", {})
        out.append(_table(["queue (no-op jobs)", "enqueue single /s", "enqueue batch /s",
                           "drain /s", "drain, 2 processes /s", "latency p50 ms", "p95 ms", "p99 ms"], rows))
        out.append(f"  enqueue {sizes.get('enqueue_n')} jobs (batch {sizes.get('enqueue_batch')}); drain "
                   f"{sizes.get('drain_n')} jobs; latency {sizes.get('latency_rate')} jobs/s for "
                   f"{sizes.get('latency_seconds')} s")
        if "drain2" in q:
            ratios = [f"jobfeed / {peer} {_n(_ratio(_get(q, 'drain2', 'jobfeed', 'rate'), _get(q, 'drain2', peer, 'rate')), 2)}x"
                      for peer in ("pgqueuer", "raw") if peer in q["drain2"]]
            out.append("  drain, 2 processes: two worker processes each (jobfeed: `jobfeed worker --processes 2`; "
                       "the others: two worker commands)" + (": " + ", ".join(ratios) if ratios else ""))
        for s in systems:
            cfg = _get(q, "drain", s, "settings") or _get(q, "latency", s, "settings")
            if cfg:
                out.append(f"  {s}: " + ", ".join(f"{k}={v}" for k, v in cfg.items()))
        for s, err in r.get("errors", {}).items():
            out.append(f"  {s}: NOT RUN ({err.splitlines()[0][:160]})")
        out.append("")

    http = q.get("http")
    if http:
        rows = [[name, _n(_get(http, key, "rate")), _n(_get(http, key, "p50_ms"), 1), _n(_get(http, key, "p99_ms"), 1),
                 "ok" if _get(http, key, "ok") else "COUNT WRONG"]
                for name, key in (("jobfeed POST /api/jobs, new targets", "jobfeed_new"),
                                  ("jobfeed POST /api/jobs, duplicate targets", "jobfeed_dup"),
                                  ("naive route: asyncpg INSERT ON CONFLICT (+ SELECT), new targets", "naive_new"),
                                  ("naive route, duplicate targets", "naive_dup"),
                                  ("no-I/O Starlette route, same JSON (the ceiling)", "bare"))]
        out.append(_table(["HTTP (1 uvicorn process)", "requests/s", "p50 ms", "p99 ms", "counts"], rows))
        out.append("  references: the mean of a run before and a run after jobfeed's")
        out.append(f"  {_get(http, 'jobfeed_new', 'connections')} keep-alive connections, "
                   f"{_get(http, 'jobfeed_new', 'seconds')} s each; server: {http.get('server')}")
        out.append("")

    sse = q.get("sse")
    if sse:
        rows = [
            [f"progress of the hot job -> its {sse.get('hot')} watchers", _n(_get(sse, "hot_job", "p50_ms"), 1),
             _n(_get(sse, "hot_job", "p99_ms"), 1), _n(_get(sse, "hot_job", "max_ms"), 1)],
            [f"claim of all {sse.get('jobs')} jobs -> all {sse.get('watchers')} watchers",
             _n(_get(sse, "claim_all", "p50_ms"), 1), _n(_get(sse, "claim_all", "p99_ms"), 1),
             _n(_get(sse, "claim_all", "max_ms"), 1)],
            ["completion of all jobs -> all watchers", _n(_get(sse, "complete_all", "p50_ms"), 1),
             _n(_get(sse, "complete_all", "p99_ms"), 1), _n(_get(sse, "complete_all", "max_ms"), 1)],
            ["reference: bare sse-starlette, one event put in every client's queue",
             _n(_get(sse, "bare", "p50_ms"), 1), _n(_get(sse, "bare", "p99_ms"), 1), _n(_get(sse, "bare", "max_ms"), 1)],
        ]
        out.append(_table([f"SSE, {sse.get('watchers')} streams on 1 API process (commit -> receipt)",
                           "p50 ms", "p99 ms", "max ms"], rows))
        jm, bm = _get(sse, "memory", "bytes_per_stream"), _get(sse, "bare", "memory", "bytes_per_stream")
        out.append(f"  memory per open stream: jobfeed {_n(jm and jm / 1024, 1)} KiB, bare sse-starlette "
                   f"{_n(bm and bm / 1024, 1)} KiB; opened in {_n(_get(sse, 'opened', 'seconds'), 1)} s / "
                   f"{_n(_get(sse, 'bare', 'opened', 'seconds'), 1)} s; counts "
                   f"{'ok' if sse.get('ok') and _get(sse, 'bare', 'ok') else 'WRONG'}")
        out.append("")

    depth = q.get("depth")
    if depth:
        rows = [[f"{_n(_get(depth, k, 'due'))} queued" + (f" + {_n(_get(depth, k, 'future'))} due in a day"
                                                          if _get(depth, k, "future") else ""),
                 _n(_get(depth, k, "rate")), _n(_get(depth, k, "load_seconds"), 1),
                 "ok" if _get(depth, k, "ok") else "COUNT WRONG"] for k in ("base", "deep", "future")]
        out.append(_table([f"depth (jobfeed drains {_n(_get(depth, 'base', 'drain_n'))})", "jobs/s",
                           "load s", "counts"], rows))
        out.append("")

    keys = q.get("keys")
    if keys:
        rows = [[label, _n(_get(keys, k, "rate")), "ok" if _get(keys, k, "ok") else "COUNT WRONG"]
                for k, label in (("uncapped", "no key, no cap"),
                                 ("capped", f"{_n(_get(keys, 'capped', 'keys'))} keys, max_running_per_key=1"))]
        ratio = _ratio(_get(keys, "capped", "rate"), _get(keys, "uncapped", "rate"))
        out.append(_table([f"keys (jobfeed drains {_n(_get(keys, 'capped', 'n'))})", "jobs/s", "counts"], rows))
        out.append(f"  capped / uncapped: {'-' if ratio is None else f'{ratio:.3f}x'}")
        out.append("")

    rows = []
    for t in targets(r):
        v = t["value"]
        shown = "-" if v is None else (f"{v:.3f}x" if t["unit"] == "x" else f"{v:.1f} ms")
        bound = f"{t['op']} {t['bound']:g}{'x' if t['unit'] == 'x' else ' ms'}"
        rows.append([t["target"], shown, bound, t["verdict"]])
    out.append(_table(["target (issues 4, 14)", "measured", "target", ""], rows))
    met = sum(1 for t in targets(r) if t["verdict"] == "MET")
    out.append(f"  {met} of {len(rows)} targets met; total time {r.get('seconds', 0):.0f} s")
    return "\n".join(out)
