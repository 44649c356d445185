"""A one-job claim taken apart, on an embedded PostgreSQL of its own: the
worker's call (claim_v3), the function it goes straight to for one kind
(claim_kind_v2), that function's UPDATE and NOTIFY as one plain statement, and
raw's UPDATE of a bare table with one index. Each variant claims one job per
call, prepared, on one connection, with synchronous_commit off for the session
(as the claim sets it for its own transaction); the variants take turns,
reversed every round, and each round's median call time is reported.

python -m bench.claim_parts [--n 3000] [--rounds 4]"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from jobfeed.worker import db, migrate
from jobfeed.worker.queue import Queue

from . import pg

# The UPDATE claim_kind_v2 runs for one kind with nothing expired, with its
# parameters written in.
_UPDATE = """
with upd as (
    update jobfeed.jobs j
       set state = 'running', attempts = j.attempts + 1, generation = j.generation + 1,
           lease_until = now() + interval '5 minutes', worker_id = 'w', claimed_at = now(),
           started_at = coalesce(j.started_at, now()), version = j.version + (j.generation = 0)::int,
           updated_at = case when j.generation = 0 then now() else j.updated_at end
     where j.id = any (array(select q.id from jobfeed.jobs q
                              where q.kind = 'k' and q.state = 'queued' and q.run_after <= now()
                              order by q.priority desc, q.run_after, q.id
                              limit 1 for update skip locked))
    returning j.*
), note as (
    select jobfeed.notify_changed(array_agg(u.id), array_agg(u.version)) from upd u
)
select u.id, u.payload from upd u, note"""

VARIANTS = {
    "claim_v3": "select * from jobfeed.claim_v3(array['k'], 1, 'w', null)",
    "claim_kind_v2": "select * from jobfeed.claim_kind_v2('k', 1, 'w', null, now(), false)",
    "update": _UPDATE,
    "raw": """update rawq set state = 'running', attempts = attempts + 1
               where id = (select id from rawq where state = 'queued' order by id limit 1 for update skip locked)
              returning id, payload""",
}
WARMUP = 200  # calls before timing: the plans settle (custom, then generic)


async def _round(conn, name: str, label: str, n: int) -> float:
    """n jobs in, n one-job claims out; the median call of the timed ones, in us."""
    if name == "raw":
        await conn.execute("insert into rawq (payload) select '{}' from generate_series(1, $1::int)", n)
    else:
        await conn.execute("insert into jobfeed.jobs (kind, target) select 'k', $2 || g "
                           "from generate_series(1, $1::int) g", n, label)
    await conn.execute("vacuum analyze")
    stmt = await conn.prepare(VARIANTS[name])
    times = []
    for i in range(n):
        started = time.perf_counter()
        rows = await stmt.fetch()
        if i >= WARMUP:
            times.append(time.perf_counter() - started)
        if len(rows) != 1:
            raise AssertionError(f"{name}: a claim took {len(rows)} jobs, not 1")
    return statistics.median(times) * 1e6


async def measure(n: int, rounds: int) -> dict[str, list[float]]:
    with pg.Server() as server:
        conn = await db.connect(await server.new_database("claim_parts"), name="bench-claim-parts")
        try:
            await migrate.migrate(conn)
            await Queue(conn).register_kind("k", max_attempts=5, lease=300, backoff=(60,))
            await conn.execute("create table rawq (id bigserial primary key, state text not null default 'queued',"
                               " attempts int not null default 0, payload jsonb not null default '{}')")
            await conn.execute("create index on rawq (id) where state = 'queued'")
            await conn.execute("set synchronous_commit = off")
            result: dict[str, list[float]] = {name: [] for name in VARIANTS}
            for r in range(rounds):
                for name in list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS)):
                    result[name].append(await _round(conn, name, f"r{r}-{name}-", n))
            return result
        finally:
            await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=3000, help="claims per variant and round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    if args.n <= WARMUP:
        parser.error(f"--n must be more than the {WARMUP} warm-up calls")
    result = asyncio.run(measure(args.n, args.rounds))
    if args.json:
        print(json.dumps(result))
        return
    for name, medians in result.items():
        print(f"{name:14s} {statistics.median(medians):6.0f} us  (rounds: {', '.join(f'{m:.0f}' for m in medians)})")


if __name__ == "__main__":
    main()
