"""Reading a JSON request body without letting a large one in: the declared
Content-Length is checked before reading, and bytes are counted while reading
(a chunked body declares nothing). A body must say it is JSON
(application/json or any +json type), else 415: a form another site posts
cannot pass for one."""

from __future__ import annotations

import json
import sys
from typing import Any

from starlette.requests import Request

from jobfeed.worker.submission import JSON_DECODER

from .errors import ApiError
from .parse import digits


def too_large(message: str) -> ApiError:
    """413 for a body over its limit (a JSON body's, or an upload's)."""
    # Connection: close makes the server hang up instead of draining the rest.
    return ApiError(413, "payload_too_large", message, headers={"Connection": "close"})


def is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    kind, _, subtype = media.partition("/")
    return bool(kind) and (subtype == "json" and kind == "application" or subtype.endswith("+json"))


def _unsupported(content_type: str) -> ApiError:
    return ApiError(415, "unsupported_media_type",
                    f"the body must be JSON (Content-Type: application/json), not {content_type[:100]!r}")


def check_coding(request: Request) -> None:
    """415 for a body sent compressed (Content-Encoding other than identity):
    jobfeed reads bodies as they come, so one would be read as its compressed
    bytes, or, marked but not compressed, taken although its sender meant
    something else."""
    coding = request.headers.get("content-encoding")
    if coding is not None and coding.strip().lower() not in ("", "identity"):
        raise ApiError(415, "unsupported_media_type",
                       f"Content-Encoding {coding[:40]!r} is not supported: send the body uncompressed")


_REQUIRED: Any = object()


async def read_json(request: Request, limit: int, *, if_empty: Any = _REQUIRED) -> Any:
    """The body's JSON; if_empty, when given, stands for a request with no body
    (a route whose fields are all optional)."""
    content_type = request.headers.get("content-type")
    if content_type is not None and not is_json(content_type):
        raise _unsupported(content_type)
    check_coding(request)
    declared = digits(request.headers.get("content-length", "").strip(), 19)
    if declared is not None and declared > limit:
        raise too_large(f"the request body is over {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(f"the request body is over {limit} bytes")
        chunks.append(chunk)
    if content_type is None and size:  # a body that does not say what it is
        raise _unsupported("")
    if not size and if_empty is not _REQUIRED:
        return if_empty
    return decode_json(b"".join(chunks), "the body")


def json_object(body: Any, fields: set[str], shape: str) -> dict:
    """body as a JSON object of the given fields only: 422 invalid_request for
    anything else (shape says what the body must be), an unknown field named."""
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_request", f"the body must be {shape}")
    unknown = sorted(set(body) - fields)
    if unknown:
        raise ApiError(422, "invalid_request", f"unknown field(s): {', '.join(unknown)}")
    return body


def decode_json(data: bytes, what: str) -> Any:
    """JSON in any of its encodings, as json.loads reads it; refused with a
    fixed message (the parser's own text describes our internals)."""
    try:
        return JSON_DECODER.decode(data.decode(json.detect_encoding(data), "surrogatepass"))
    except ValueError as exc:  # UnicodeDecodeError is one
        if "integer string conversion" in str(exc):  # valid, but Python reads no such integer
            raise ApiError(400, "invalid_json", f"a number in {what} has more than "
                                                f"{sys.get_int_max_str_digits()} digits") from None
        raise ApiError(400, "invalid_json", f"{what} is not valid JSON") from None
    except RecursionError:
        raise ApiError(400, "invalid_json", f"{what}'s JSON is nested too deeply") from None
