"""Each rule in one place: the Python lists of states and statuses and the size
limits agree with the browser's copy and with what the SQL does."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from jobfeed.worker import limits, states
from jobfeed.worker.queue import QueueError

ROOT = Path(__file__).resolve().parent.parent
STATES_JS = ROOT / "static" / "js" / "states.js"


def _index_states(indexdef: str) -> set[str]:
    return set(re.findall(r"'(\w+)'::jobfeed\.job_state", indexdef))


# ---------------------------------------------------------------- Python and browser (no database)

def test_the_derived_lists_follow_the_states():
    assert set(states.TERMINAL) < set(states.STATES)
    assert states.UNFINISHED == tuple(s for s in states.STATES if s not in states.TERMINAL)
    assert set(states.STATUSES) == {"queued", "processing"} | states.TERMINAL
    assert set(states.RETRYABLE) == states.TERMINAL - {"completed"}


def _js_list(values) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def test_the_browser_module_holds_the_same_literals():
    """JOBFEED_UPDATE_STATES=1 rewrites the browser's lists from the Python ones
    (so a new state is one line in worker/states.py, plus its SQL)."""
    text = STATES_JS.read_text()
    if os.environ.get("JOBFEED_UPDATE_STATES") == "1":
        terminal = sorted(states.TERMINAL, key=states.STATES.index)
        text = re.sub(r"(export const STATES = )\[[^\]]*\]", lambda m: m.group(1) + _js_list(states.STATES), text)
        text = re.sub(r"(export const TERMINAL = new Set\()\[[^\]]*\]", lambda m: m.group(1) + _js_list(terminal),
                      text)
        STATES_JS.write_text(text)
    found = {name: json.loads(body) for name, body in
             re.findall(r'export const (\w+) = (?:new Set\()?(\[(?:"\w+"(?:, )?)*\])', text)}
    assert found == {"STATES": list(states.STATES), "TERMINAL": sorted(states.TERMINAL, key=states.STATES.index)}


@pytest.mark.skipif(shutil.which("node") is None and os.environ.get("CI") != "true",
                    reason="no node to evaluate the module with (CI machines have it: there it must run)")
def test_the_browser_module_evaluates_to_the_python_lists(tmp_path):
    # Evaluate the module itself: the derived lists too, as the browser sees them.
    script = ("import * as s from %s;\n"
              "console.log(JSON.stringify(Object.fromEntries(Object.entries(s).map("
              "([k, v]) => [k, [...v]]))));") % json.dumps(STATES_JS.as_uri())
    out = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True,
                         timeout=30, check=True)
    got = json.loads(out.stdout)
    assert got == {
        "STATES": list(states.STATES), "TERMINAL": sorted(states.TERMINAL, key=states.STATES.index),
        "STATUSES": list(states.STATUSES), "UNFINISHED": list(states.UNFINISHED),
        "CANCELABLE": list(states.CANCELABLE), "RETRYABLE": list(states.RETRYABLE)}


# ---------------------------------------------------------------- Python and SQL

async def test_states_are_the_databases_enum(pool):
    assert await pool.fetchval("select enum_range(null::jobfeed.job_state)::text[]") == list(states.STATES)


async def test_public_statuses_are_what_sql_shows(pool):
    rows = await pool.fetch("select s::text as state, g, jobfeed.public_status(s, g) as status "
                            "from unnest(enum_range(null::jobfeed.job_state)) s, (values (0), (1)) v(g)")
    assert {r["status"] for r in rows} == set(states.STATUSES)
    for r in rows:
        if r["state"] in states.TERMINAL:
            assert r["status"] == r["state"], r
        else:
            assert r["status"] not in states.TERMINAL, r


async def test_unfinished_and_terminal_are_the_indexes_states(pool):
    defs = dict(await pool.fetch("select indexname, indexdef from pg_indexes "
                                 "where schemaname = 'jobfeed' and tablename = 'jobs'"))
    # the target index names the final states ("not one of them"), so a state
    # added later holds its target without rebuilding the index
    assert "<> ALL" in defs["jobs_unfinished_target"]
    assert _index_states(defs["jobs_unfinished_target"]) == states.TERMINAL
    assert _index_states(defs["jobs_finished_at"]) == states.TERMINAL


async def test_the_target_limit_is_the_sqls(pool):
    """Target and concurrency key: the SQL rules (migration 0019: functions,
    not CHECK constraints) take the bytes Python takes, and no more."""
    for function, column in (("submission_problem", "p_target"), ("key_problem", "p_concurrency_key")):
        text = await pool.fetchval("select pg_get_functiondef($1::regproc)", f"jobfeed.{function}")
        limit = re.search(rf"octet_length\({column}\) not between 1 and (\d+)", text)
        assert limit and limit.group(1) == str(limits.MAX_TARGET_BYTES), function
    problem = "select jobfeed.submission_problem(repeat('a', $1), '{}', $2)"
    assert await pool.fetchval(problem, limits.MAX_TARGET_BYTES, limits.MAX_PAYLOAD_BYTES) is None
    refused = await pool.fetchval(problem, limits.MAX_TARGET_BYTES + 1, limits.MAX_PAYLOAD_BYTES)
    assert refused[1] == "invalid_target"
    key = "select jobfeed.key_problem(repeat('é', $1))"
    assert await pool.fetchval(key, limits.MAX_TARGET_BYTES // 2) is None
    assert (await pool.fetchval(key, limits.MAX_TARGET_BYTES // 2 + 1))[1] == "invalid_concurrency_key"
    # no CHECK constraint on jobs is left to hold them
    assert await pool.fetchval("select count(*) from pg_constraint c "
                               "where c.conrelid = 'jobfeed.jobs'::regclass and c.contype = 'c'") == 0


async def test_every_sql_payload_limit_defaults_to_the_pythons(pool):
    signatures = await pool.fetch(
        "select p.proname, pg_get_function_arguments(p.oid) as args from pg_proc p "
        "where p.pronamespace = 'jobfeed'::regnamespace and 'p_max_payload' = any (p.proargnames)")
    defaults = {row["proname"]: re.search(r"p_max_payload integer DEFAULT (\d+)", row["args"])
                for row in signatures}
    assert defaults["submit"], "submit's p_max_payload has no default"
    for name, default in defaults.items():  # the others take it from their caller
        assert default is None or int(default.group(1)) == limits.MAX_PAYLOAD_BYTES, name


async def test_queue_submits_up_to_the_payload_limit_and_no_further(queue, k):
    # jsonb prints {"pad": "..."}: eleven characters around the padding.
    await queue.submit(k, "fits", {"pad": "x" * (limits.MAX_PAYLOAD_BYTES - 11)})
    with pytest.raises(QueueError) as refused:
        await queue.submit(k, "over", {"pad": "x" * (limits.MAX_PAYLOAD_BYTES - 10)})
    assert refused.value.code == "payload_too_large"
