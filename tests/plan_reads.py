"""Reading PostgreSQL's plans in the tests: how many rows each node of a
statement's plan handled (auto_explain's, with analyze), and the check that a
session's calls, planned on small tables, still read few rows once the table
grew (the plans PL/pgSQL and the plan cache keep)."""

from __future__ import annotations

import re

from queue_sql import explained
from jobfeed.worker import db

_NODE_ROWS = re.compile(r"actual time=[\d.]+\.\.[\d.]+ rows=([\d.]+) loops=(\d+)")
_THROWN_AWAY = re.compile(r"Rows Removed by (?:Join )?Filter: (\d+)")


def rows_returned(plans: str) -> list[float]:
    """The rows each plan node returned, times its loops."""
    return [float(rows) * int(loops) for rows, loops in _NODE_ROWS.findall(plans)]


def rows_of(line: str) -> list[float]:
    """The rows a plan line's node handled: returned (times its loops), or read and thrown away."""
    return rows_returned(line) + [float(n) for n in _THROWN_AWAY.findall(line)]


def most_rows_one_node_read(plans: str) -> float:
    """The most rows any one plan node handled."""
    return max(n for line in plans.splitlines() for n in rows_of(line))


def heavy_lines(plans: str) -> str:
    """The plan lines (with the line before each) that handled more than 100 rows."""
    lines = plans.splitlines()
    return "\n".join(f"{lines[i - 1]}\n{line}" for i, line in enumerate(lines)
                     if any(n > 100 for n in rows_of(line)))


async def call_each(conn, calls: dict, plans_of: bool, took) -> None:
    """Run each named call in order, handing its rows to took(name, rows);
    with plans_of, no node of any statement it ran may read more than 100 rows."""
    for name, (sql, args) in calls.items():
        if plans_of:
            rows, plans = await explained(conn, sql, *args(), analyze=True)
            assert most_rows_one_node_read(plans) <= 100, (name, heavy_lines(plans))
        else:
            rows = await conn.fetch(sql, *args())
        took(name, rows)


async def planned_small_then_grown(dsn, calls: dict, took, before_each, grow) -> None:
    """The calls, in order, on one connection, each round after
    before_each(tag): ten rounds on small tables, whose plans the session
    keeps; then grow(); then a last round (tag "late") in which no plan node
    of any call may read more than 100 rows."""
    conn = await db.connect(dsn)
    try:
        for i in range(10):
            await before_each(f"early{i}")
            await call_each(conn, calls, False, took)
        await grow()
        await before_each("late")
        await call_each(conn, calls, True, took)
    finally:
        await conn.close()


async def finished(pool, n: int = 5000) -> None:
    await pool.execute("insert into jobfeed.jobs (kind, target, state, finished_at) "
                       "select 'k', 'done' || g, 'completed', now() from generate_series(1, $1::int) g", n)
