"""The commands about jobs: `jobfeed submit`, `jobfeed show`, `jobfeed leave`,
and an admin's `jobfeed retry` and `jobfeed cancel`."""

from __future__ import annotations

import json
import mimetypes
import os
import sys
import uuid
from typing import Any, Awaitable, Callable

from . import db, files, migrate as migrations, tasks
from .queue import Queue, QueueError
from .settings import Settings
from .startup import DEMO_KIND, UsageError, load_demo_checks, prepare
from .submission import check_schedule, check_submission, parse_after, parse_payload
from .terminal import shown



async def cmd_submit(settings: Settings, args) -> int:
    # The payload's shape first (no database needed), then what the API checks,
    # once the kind's module is loaded.
    payload = parse_payload(args.payload) if args.payload is not None else {}
    after = parse_after(args.after)
    schedule = check_schedule(args.at, args.delay, args.priority, args.key)
    inputs = _inputs(args.file, settings.max_upload)
    dsn = await prepare(settings)
    kind, target, payload = check_submission(args.kind, args.target, payload)
    # A request, as over HTTP: the kind's request policies (reuse_for,
    # on_duplicate="reject_different") apply, and `jobfeed leave` takes its id.
    asked = {"request": True, "force": args.force, "max_payload": settings.max_payload, "after": after,
             **schedule.kwargs()}
    pool = await db.create_pool(dsn, min_size=1, max_size=2, name="jobfeed-submit")
    try:
        queue = Queue(pool)
        await tasks.register_kinds(queue, settings, overwrite=False)
        if kind == DEMO_KIND and await load_demo_checks(queue):
            check_submission(kind, target, payload)
        if inputs:
            async with pool.acquire() as conn, conn.transaction():
                # the job and its files commit together, as with an HTTP upload
                staging = files.Staging(conn)
                for name, path in inputs:
                    await staging.begin(name, mimetypes.guess_type(path)[0] or files.DEFAULT_CONTENT_TYPE)
                    with open(path, "rb") as f:
                        while data := f.read(files.CHUNK_SIZE):
                            await staging.write(data)
                    await staging.end()
                s = await Queue(conn, settings=settings).submit(kind, target, payload, **asked)
                await staging.attach(s.id, s.created)
        else:
            s = await queue.submit(kind, target, payload, **asked)
        job_id, created = s.id, s.created
        if not args.follow:
            if args.json:  # the view as GET shows it (its position too), and what HTTP adds
                print(json.dumps({**(await queue.get_job(job_id) or {}), **_answer(s)}))
            else:
                print(job_id)
            return 0
        if not args.json:
            print(job_id, flush=True)
            if not created:
                print("(an unfinished job already had this target: following it)", file=sys.stderr)
        from .follow import follow
        view = await follow(queue, dsn, job_id)
        if args.json:
            print(json.dumps({**view, **_answer(s)}))
        return 0 if view["status"] == "completed" else 1
    finally:
        await pool.close()


def _answer(s) -> dict[str, Any]:
    """What a POST /api/jobs answer adds to the job's view."""
    return {"deduplicated": not s.created and not s.reused, "reused": s.reused, "request_id": str(s.request_id)}


def _inputs(specs: list[str], limit: int) -> list[tuple[str, str]]:
    """--file NAME=PATH, checked: (name, path) pairs."""
    inputs: list[tuple[str, str]] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not os.path.isfile(path):
            raise UsageError(f"--file {spec!r}: write NAME=PATH, PATH a readable file")
        try:
            files.check_name(name)
        except ValueError as exc:
            raise UsageError(f"--file {spec!r}: {exc}") from None
        if name in (n for n, _ in inputs):
            raise UsageError(f"--file: two files are named {name!r}")
        inputs.append((name, path))
    if sum(os.path.getsize(p) for _, p in inputs) > limit:
        raise UsageError(f"--file: the files are over JOBFEED_MAX_UPLOAD ({limit} bytes)")
    return inputs


def _uuid(text: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise UsageError(f"{text!r} is not a {what}") from None


async def _one_call(settings: Settings, name: str, call: Callable[[Queue], Awaitable[Any]]) -> Any:
    """call(queue) on a one-connection pool, once the schema is known to fit."""
    dsn = await db.resolve_dsn(settings)
    await migrations.require_schema(dsn)
    pool = await db.create_pool(dsn, min_size=1, max_size=1, name=name)
    try:
        return await call(Queue(pool))
    finally:
        await pool.close()


async def cmd_show(settings: Settings, args) -> int:
    job_id = _uuid(args.id, "job id")
    view = await _one_call(settings, "jobfeed-show", lambda queue: queue.admin_get_job(job_id))
    if view is None:  # exit 1, in the log format's shape, as every command's not_found
        raise QueueError("not_found", f"no job {job_id}", 404)
    if args.json:
        print(json.dumps(view))
        return 0
    for key in ("id", "kind", "target", "state", "status", "attempts", "max_attempts", "generation",
                "run_after", "lease_until", "created_at", "finished_at"):
        print(f"{key:>13}: {shown(view.get(key))}")
    if view.get("parent_id"):  # a child: submitted by that job's handler
        print(f"{'parent_id':>13}: {shown(view['parent_id'])}")
    for key in ("progress", "last_error", "result", "payload"):
        print(f"{key:>13}: {json.dumps(view.get(key))}")
    print("     attempts:")
    for a in view["attempts_log"]:
        err = a.get("error") or {}
        print(f"  #{a['attempt']} gen {a['generation']} {shown(a['worker_id'])} {a['started_at']} -> "
              f"{a['finished_at'] or 'running'} {a['outcome'] or ''} {shown(err.get('code') or '')}")
    return 0


async def cmd_leave(settings: Settings, args) -> int:
    request_id = _uuid(args.request_id, "request id")
    # QueueError not_found: exit 1, as for show
    view = await _one_call(settings, "jobfeed-leave", lambda queue: queue.leave(request_id))
    if args.json:
        print(json.dumps(view))
    else:
        print(f"left; job {view['id']} is {view['status']} ({view['requesters']} requesters left)")
    return 0


async def cmd_retry(settings: Settings, args) -> int:
    return await _admin_action(settings, args, "retry")


async def cmd_cancel(settings: Settings, args) -> int:
    return await _admin_action(settings, args, "cancel")


async def _admin_action(settings: Settings, args, action: str) -> int:
    """What the dashboard's buttons do. One job id alone: that job, refused
    (not_found, invalid_state) as the admin route refuses it. Otherwise every
    job the ids and filters all match, as the bulk route does."""
    ids = [_uuid(text, "job id") for text in args.ids]
    filters = {"state": args.state, "kind": args.kind, "error_code": args.error_code}
    for name, value in filters.items():  # as the bulk route says of an empty filter value
        if value == "":
            raise UsageError(f"jobfeed {action}: --{name.replace('_', '-')} must be a non-empty string")
    if len(ids) == 1 and not any(filters.values()):
        view = await _one_call(settings, f"jobfeed-{action}",
                               lambda queue: queue.retry(ids[0]) if action == "retry" else queue.cancel(ids[0]))
        print(json.dumps(view) if args.json else f"job {view['id']}: {view['state']}")
        return 0
    if not ids and not any(filters.values()):
        raise UsageError(f"jobfeed {action}: name job ids, or a filter (--state, --kind, --error-code)")
    count = await _one_call(settings, f"jobfeed-{action}",
                            lambda queue: queue.bulk(action, ids=ids or None, **filters))
    done = "retried" if action == "retry" else "canceled"
    print(json.dumps({"count": count}) if args.json else f"{count} job{'' if count == 1 else 's'} {done}")
    return 0
