"""The raw SQL baseline: the least a PostgreSQL queue can do, with asyncpg.

One table, a partial index on queued ids, a statement-level trigger that NOTIFYs
once per INSERT statement (a queue whose workers must poll could not be compared
on latency). The worker claims up to 1,000 jobs with one `FOR UPDATE SKIP LOCKED`
statement, runs them, and completes them with one UPDATE. No leases, retries,
attempts log, dedupe or fencing: the floor, not a product."""

from __future__ import annotations

import asyncio
import json
import sys

import asyncpg

from common import COMMIT_STAMP, LOOP, Starts, emit, enqueue_or_produce, parse_settings, parser, run, wait_for_stop

SCHEMA = """
create table if not exists raw_jobs (
    id          bigserial primary key,
    kind        text not null,
    payload     jsonb not null,
    state       text not null default 'queued',
    created_at  timestamptz not null default now(),
    started_at  timestamptz,
    finished_at timestamptz
);
create index if not exists raw_jobs_queued on raw_jobs (id) where state = 'queued';
create or replace function raw_jobs_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('raw_jobs', '');
    return null;
end $$;
create or replace trigger raw_jobs_inserted after insert on raw_jobs
    for each statement execute function raw_jobs_notify();
"""

INSERT_ONE = "insert into raw_jobs (kind, payload) values ('noop', $1::jsonb)"
INSERT_MANY = "insert into raw_jobs (kind, payload) select 'noop', p from unnest($1::jsonb[]) p"
CLAIM = """
with picked as (
    select id from raw_jobs where state = 'queued' order by id limit $1 for update skip locked
)
update raw_jobs j set state = 'running', started_at = now()
  from picked where j.id = picked.id
returning j.id, j.payload::text
"""
COMPLETE = "update raw_jobs set state = 'completed', finished_at = now() where id = any($1::bigint[])"


def payload(i: int) -> str:
    return json.dumps({"i": i})


async def noop(_payload: dict) -> None:
    return None


async def worker(conn_dsn: str, starts: Starts, settings: dict[str, str]) -> dict:
    batch = int(settings.get("batch", 1000))
    listen = await asyncpg.connect(conn_dsn)
    conn = await asyncpg.connect(conn_dsn)
    wake = asyncio.Event()
    await listen.add_listener("raw_jobs", lambda *_: wake.set())
    stopping = asyncio.create_task(wait_for_stop())
    done = 0

    async def loop() -> None:
        nonlocal done
        while True:
            wake.clear()
            rows = await conn.fetch(CLAIM, batch)
            if rows:
                ids = []
                for job_id, text in rows:
                    data = json.loads(text)
                    starts.record(data["i"])
                    await noop(data)
                    ids.append(job_id)
                await conn.execute(COMPLETE, ids)
                done += len(ids)
                if len(rows) == batch:
                    continue
            try:
                await asyncio.wait_for(wake.wait(), 1.0)
            except asyncio.TimeoutError:
                pass

    emit({"ready": True, "settings": {"claim_batch": batch, "complete": "one UPDATE per batch",
                                      "wake": "LISTEN raw_jobs, poll 1 s", "loop": LOOP}})
    runner = asyncio.create_task(loop())
    await stopping
    runner.cancel()
    try:
        await runner
    except asyncio.CancelledError:
        pass
    await conn.close()
    await listen.close()
    starts.dump()
    return {"stopped": True, "completed_here": done}


async def main(argv: list[str]) -> None:
    args = parser(__doc__).parse_args(argv)
    if args.command == "setup":
        conn = await asyncpg.connect(args.dsn)
        await conn.execute(SCHEMA)
        await conn.close()
        emit({"ok": True})
    elif args.command in ("enqueue", "produce"):
        conn = await asyncpg.connect(args.dsn)

        async def single(i: int) -> None:
            await conn.execute(INSERT_ONE, payload(i))

        async def many(ids: list[int]) -> None:
            await conn.execute(INSERT_MANY, [payload(i) for i in ids])

        await enqueue_or_produce(args, single, many)
        await conn.close()
    elif args.command == "load":
        conn = await asyncpg.connect(args.dsn)
        async with conn.transaction():
            await conn.execute(INSERT_MANY, [payload(i) for i in range(1, args.n + 1)])
            committed_at = await conn.fetchval(COMMIT_STAMP)
        emit({"n": args.n, "committed_at": committed_at})
        await conn.close()
    elif args.command == "worker":
        emit(await worker(args.dsn, Starts(args.starts), parse_settings(args.set)))


if __name__ == "__main__":
    run(main(sys.argv[1:]))
