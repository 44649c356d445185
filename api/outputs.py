"""GET /api/jobs/{id}/outputs/{name}: a file a handler saved (ctx.save_output),
streamed from the database a chunk at a time, with single byte ranges
(Range: bytes=a-b, a-, -n). Who may see the job may download its outputs
(JOBFEED_JOB_ACCESS); anyone else gets 404.

The content type is the handler's, so the answer is always an attachment,
never sniffed, and sandboxed: an output of type text/html must not run as a
page of this origin (where the admin session cookie lives); nor may a script
or a stylesheet, which a page loads whatever the attachment says."""

from __future__ import annotations

import re
import urllib.parse

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from jobfeed.worker import files

from . import access
from .errors import ApiError
from .state import services
from .views import parse_job_id

_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)
_PAST_ANY_FILE = 10 ** 18
# Types a page of this origin would run or apply when it names the output in
# <script src> or <link rel=stylesheet> (nosniff lets through exactly these,
# and the CSP's 'self' allows this origin): served as bytes. The JavaScript
# MIME types are WHATWG's list; the view still says the type it was saved with.
_ACTIVE_TYPES = re.compile(r"(text|application)/(x-)?(java|ecma)script|text/(javascript1\.[0-5]|jscript|livescript)"
                           r"|text/css")


def served_type(content_type: str) -> str:
    """The Content-Type an output is served with."""
    essence = content_type.split(";", 1)[0].strip().lower()
    return "application/octet-stream" if _ACTIVE_TYPES.fullmatch(essence) else content_type


def _position(digits: str) -> int:
    """A byte position as written; one of more digits than any file's size
    has stands for "past the end" (and int() of thousands of digits is slow)."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 18 else _PAST_ANY_FILE


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, end exclusive) that a Range header asks for; None: the whole
    file (no header, or one we do not serve: several ranges, another unit, a
    malformed one, which RFC 9110 lets a server ignore). ApiError 416 when it
    is satisfiable by no byte of the file."""
    if header is None:
        return None
    match = _RANGE.match(header)
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    if not first and not last:
        return None
    if not first:  # the last n bytes
        n = _position(last)
        if n == 0 or size == 0:
            raise _unsatisfiable(size)
        return max(size - n, 0), size
    start = _position(first)
    end = size if not last else _position(last) + 1
    if last and end <= start:
        return None  # a-b with b < a is invalid: ignored
    if start >= size:
        raise _unsatisfiable(size)
    return start, min(end, size)


def _unsatisfiable(size: int) -> ApiError:
    return ApiError(416, "range_not_satisfiable", f"the output has {size} bytes",
                    headers={"Content-Range": f"bytes */{size}"})


async def download(request: Request) -> Response:
    job_id = parse_job_id(request.path_params["job_id"])
    svc = services(request)
    await access.require_view(svc, request, job_id)
    try:
        f = await files.find(svc.pool, job_id, "out", request.path_params["name"])
    except files.FileNotFound:
        raise ApiError(404, "not_found", "no such output") from None
    headers = {
        "Accept-Ranges": "bytes",
        "ETag": f'"{f.id}"',  # a replaced output has a new id
        "Content-Disposition": f"attachment; filename*=UTF-8''{urllib.parse.quote(f.name, safe='')}",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "sandbox",
        "Cross-Origin-Resource-Policy": "same-origin",  # no other site embeds it either
        "Cache-Control": "private, no-cache",
        # as the handler saved it: given as media_type, Starlette would add
        # "; charset=utf-8" to a text/* type whatever the bytes' encoding
        "Content-Type": served_type(f.content_type),
    }
    wanted = byte_range(request.headers.get("range"), f.size)
    if_range = request.headers.get("if-range")
    if wanted is not None and if_range is not None and if_range != headers["ETag"]:
        wanted = None  # the client's partial copy is of another file: send this one whole
    status, start, end = 200, 0, f.size
    if wanted is not None:
        status, (start, end) = 206, wanted
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{f.size}"
    headers["Content-Length"] = str(end - start)
    if request.method == "HEAD":  # the headers alone: nothing is read from the database
        return Response(status_code=status, headers=headers)
    return StreamingResponse(files.read(svc.pool, f, start, end), status_code=status, headers=headers)
