"""POST /api/jobs as multipart/form-data: a part named `job` (the usual JSON
body) and file parts, each an input of the job under its part's name.

The body is parsed as it arrives (python-multipart's streaming parser) and
each file goes into PostgreSQL CHUNK_SIZE bytes at a time, so no file is ever
whole in memory. Everything happens in one transaction on one connection: the
files are staged first, then the job is submitted and they are attached to
it, or discarded when the submission joined an existing job. A job thus
becomes visible (and claimable) with all its files or not at all, and a
refusal anywhere (413 over JOBFEED_MAX_UPLOAD, bad parts, a refused
submission, a client that hangs up) rolls back everything. Uploads bypass the
group commit: a batch must never wait for a slow body."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from jobfeed.worker import files
from jobfeed.worker.queue import Queue

from . import jobs
from .auth import own_origin
from .body import check_coding, decode_json, too_large
from .errors import ApiError
from .parse import digits
from .state import Services, services

# python-multipart logs every malformed body at WARNING: a client could fill
# the logs with its garbage. It is answered 400 instead.
logging.getLogger("python_multipart").setLevel(logging.ERROR)

MAX_FILES = 64            # file parts per submission
MAX_PART_HEADERS = 16384  # bytes of one part's headers


def is_multipart(content_type: str | None) -> bool:
    return (content_type or "").split(";", 1)[0].strip().lower() == "multipart/form-data"


def _bad(message: str) -> ApiError:
    return ApiError(400, "invalid_multipart", message)


def _too_large(limit: int) -> ApiError:
    return too_large(f"the upload is over JOBFEED_MAX_UPLOAD ({limit} bytes)")


def _check_origin(request: Request) -> None:
    """A cross-site HTML form may post multipart/form-data without a CORS
    preflight (JSON it cannot): only our own pages, allowed origins and
    clients that are not browsers (no Origin) may upload."""
    # every copy of a header must pass: a second one may be the foreign one
    origins = request.headers.getlist("origin")
    if not origins:
        if all(site in ("same-origin", "none") for site in request.headers.getlist("sec-fetch-site")):
            return
    elif all(o == own_origin(request) or o in services(request).settings.cors_origins for o in origins):
        return
    raise ApiError(403, "csrf", "an upload must come from this server's own pages or an allowed origin")


class _Events:
    """python-multipart calls back synchronously; the callbacks record what
    happened, and the async side acts on it (writes to the database) after
    each piece of the body."""

    def __init__(self) -> None:
        self.items: list[tuple[str, bytes | dict[bytes, bytes]]] = []
        self.ended = False
        self._header_bytes = 0
        self._field = b""
        self._value = b""
        self.headers: dict[bytes, bytes] = {}

    def callbacks(self) -> dict[str, Callable]:
        def data(d: bytes, s: int, e: int) -> None:
            self.items.append(("data", d[s:e]))

        def field(d: bytes, s: int, e: int) -> None:
            self._count(e - s)
            self._field += d[s:e]

        def value(d: bytes, s: int, e: int) -> None:
            self._count(e - s)
            self._value += d[s:e]

        def header_end() -> None:
            self.headers[self._field.strip().lower()] = self._value.strip()
            self._field = self._value = b""

        def part_begin() -> None:
            self.headers = {}
            self._header_bytes = 0

        def end() -> None:
            self.ended = True

        return {"on_part_begin": part_begin, "on_part_data": data,
                "on_part_end": lambda: self.items.append(("end", b"")),
                "on_header_field": field, "on_header_value": value, "on_header_end": header_end,
                "on_headers_finished": lambda: self.items.append(("headers", self.headers)), "on_end": end}

    def _count(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > MAX_PART_HEADERS:
            raise _bad(f"a part's headers are over {MAX_PART_HEADERS} bytes")


class _Upload:
    """One request's parts, written as they come on `conn` (in a transaction)."""

    def __init__(self, request: Request, svc: Services, conn) -> None:
        self.request = request
        self.svc = svc
        self.conn = conn
        self.sub: jobs.Submitting | None = None
        self.staging = files.Staging(conn)
        self.names: set[str] = set()
        self._job: bytearray | None = None
        self._in_file = False

    async def headers(self, headers: dict[bytes, bytes]) -> None:
        disposition, params = parse_options_header(headers.get(b"content-disposition", b""))
        if disposition != b"form-data" or b"name" not in params:
            raise _bad("each part needs Content-Disposition: form-data with a name")
        name = params[b"name"].decode("utf-8", "replace")
        if name == "job":
            if self.sub is not None or self._job is not None:
                raise _bad("only one part may be named job")
            self._job = bytearray()
            return
        try:
            files.check_name(name)
        except ValueError as exc:
            raise ApiError(422, "invalid_file_name", str(exc)) from None
        try:
            content_type = files.check_content_type(headers.get(b"content-type", b"").decode("latin-1") or None)
        except ValueError as exc:
            raise ApiError(422, "invalid_content_type", f"file {name!r}: {exc}") from None
        if name in self.names:
            raise ApiError(422, "invalid_file_name", f"two files are named {name!r}")
        if len(self.names) >= MAX_FILES:
            raise ApiError(422, "too_many_files", f"at most {MAX_FILES} files per submission")
        self.names.add(name)
        await self.staging.begin(name, content_type)
        self._in_file = True

    async def data(self, data: bytes) -> None:
        if self._job is not None:
            self._job += data
            if len(self._job) > self.svc.body_limit:
                raise ApiError(413, "payload_too_large", f"the job part is over {self.svc.body_limit} bytes")
        elif self._in_file:
            await self.staging.write(data)

    async def end(self) -> None:
        if self._job is not None:
            body = decode_json(bytes(self._job), "the job part")
            await jobs.demo_checks(body, self.svc)
            self.sub = jobs.check_body(body, self.svc)
            self._job = None
        elif self._in_file:
            await self.staging.end()
            self._in_file = False


def _slots(request: Request, svc: Services) -> asyncio.Semaphore:
    """An upload holds a pool connection while its body streams in: at most
    half the pool's, so slow uploads never starve the other requests."""
    state = request.app.state
    slots = getattr(state, "upload_slots", None)
    if slots is None:
        size = svc.pool.get_max_size() if hasattr(svc.pool, "get_max_size") else 10
        slots = state.upload_slots = asyncio.Semaphore(max(1, size // 2))
    return slots


async def submit_with_files(request: Request, svc: Services) -> Response:
    _check_origin(request)
    check_coding(request)
    limit = svc.settings.max_upload
    _, params = parse_options_header(request.headers.get("content-type"))
    boundary = params.get(b"boundary")
    if not boundary:
        raise _bad("multipart/form-data needs a boundary")
    declared = digits(request.headers.get("content-length", "").strip(), 19)
    if declared is not None and declared > limit:
        raise _too_large(limit)
    events = _Events()
    try:
        parser = MultipartParser(boundary, events.callbacks())  # type: ignore[arg-type]
    except (ValueError, MultipartParseError):
        raise _bad("the multipart boundary is not valid") from None
    async with _slots(request, svc), svc.pool.acquire() as conn:
        async with conn.transaction():
            upload = _Upload(request, svc, conn)
            received = 0
            try:
                async for piece in request.stream():
                    received += len(piece)
                    if received > limit:
                        raise _too_large(limit)
                    parser.write(piece)
                    for what, data in events.items:
                        if isinstance(data, dict):
                            await upload.headers(data)
                        elif what == "data":
                            await upload.data(data)
                        else:
                            await upload.end()
                    events.items.clear()
                parser.finalize()
            except MultipartParseError:
                raise _bad("the multipart body is malformed") from None
            except ClientDisconnect:
                raise _bad("the client went away before the end of its upload") from None
            if not events.ended:
                raise _bad("the multipart body ends before its closing boundary")
            if upload.sub is None:
                raise _bad("no part named job (the submission's JSON)")
            job_id, created, text, request_id, reused = await jobs.write(
                request, svc, upload.sub, Queue(conn, settings=svc.settings))
            await upload.staging.attach(job_id, created)
    return jobs.answer(request, job_id, created, text, request_id, reused)
