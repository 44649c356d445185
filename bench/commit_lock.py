"""Commits per second on this machine's PostgreSQL, with and without a NOTIFY,
waiting for the WAL flush or not, at several connections (docs/scaling.md,
"What saturates first").

python -m bench.commit_lock [--commits 2000] [--connections 1,4,16] [--out FILE]

Each commit is one small INSERT (a job's submit is one such commit); with
--connections C, C connections commit side by side, --commits in all. A
transaction that NOTIFYs holds a cluster-wide lock from its commit until its
commit record is flushed: notifying commits go one at a time through the
fsync, where others share it (group commit). Prints one JSON object; the table
counts its rows against the commits made. Runs on its own embedded PostgreSQL."""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import asyncpg

from . import pg

PLAIN = "begin; insert into commits (n) values (1); commit;"
NOTIFYING = "begin; insert into commits (n) values (1); select pg_notify('bench_commits', ''); commit;"


async def _rate(url: str, commits: int, connections: int, statement: str, synchronous: bool) -> tuple[float, int]:
    """Commits per second, and the commits made."""
    conns = [await asyncpg.connect(url) for _ in range(connections)]
    try:
        for conn in conns:
            await conn.execute(f"set synchronous_commit = {'on' if synchronous else 'off'}")
        each = max(1, commits // connections)

        async def commit(conn: asyncpg.Connection) -> None:
            for _ in range(each):
                await conn.execute(statement)

        t0 = time.perf_counter()
        await asyncio.gather(*(commit(c) for c in conns))
        return each * connections / (time.perf_counter() - t0), each * connections
    finally:
        for conn in conns:
            await conn.close()


async def measure(commits: int, connections: list[int]) -> dict:
    with pg.Server() as server:
        url = await server.new_database("commit_lock")
        await pg.execute(url, "create table commits (id bigserial primary key, n int not null)")
        rows = []
        made = 0
        for c in connections:
            for notify in (False, True):
                for synchronous in (True, False):
                    rate, n = await _rate(url, commits, c, NOTIFYING if notify else PLAIN, synchronous)
                    made += n
                    rows.append({"connections": c, "notify": notify, "synchronous_commit": synchronous,
                                 "commits_per_s": round(rate)})
        counted = await pg.fetchval(url, "select count(*) from commits")
        return {"postgres": await server.version(), "rows": rows, "commits": made, "counted": counted,
                "ok": counted == made}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commits", type=int, default=2000, help="commits per measurement")
    p.add_argument("--connections", default="1,4,16", help="comma-separated counts of connections")
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args()
    result = asyncio.run(measure(args.commits, [int(c) for c in args.connections.split(",")]))
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if not result["ok"]:
        raise SystemExit("commits lost: the table does not hold a row per commit")


if __name__ == "__main__":
    main()
