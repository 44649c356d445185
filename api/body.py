"""Reading a JSON request body without letting a large one in: the declared
Content-Length is checked before reading, and bytes are counted while reading
(a chunked body declares nothing)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from jobfeed.worker.submission import JSON_DECODER

from .errors import ApiError


def _too_large(limit: int) -> ApiError:
    # Connection: close makes the server hang up instead of draining the rest.
    return ApiError(413, "payload_too_large", f"the request body is over {limit} bytes",
                    headers={"Connection": "close"})


async def read_json(request: Request, limit: int) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    try:
        data = b"".join(chunks)
        return JSON_DECODER.decode(data.decode(json.detect_encoding(data), "surrogatepass"))  # as json.loads does
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {str(exc)[:200]}") from None
