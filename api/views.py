"""Shaping responses around the JSON views PostgreSQL builds (what is public is
decided there). Views are relayed as text wherever they pass through unchanged."""

from __future__ import annotations

import base64
import binascii
import json
import uuid

from .errors import ApiError


def with_flag(view_text: str, name: str, value: bool) -> str:
    """Add one boolean field to a JSON object given as text, without re-encoding it."""
    body = view_text.rstrip()
    assert body.endswith("}")
    sep = "" if body[:-1].rstrip().endswith("{") else ", "
    return f'{body[:-1]}{sep}"{name}": {"true" if value else "false"}}}'


def with_field(view_text: str, name: str, value) -> str:
    """Add one field (any JSON value) to a JSON object given as text."""
    body = view_text.rstrip()
    assert body.endswith("}")
    sep = "" if body[:-1].rstrip().endswith("{") else ", "
    return f'{body[:-1]}{sep}{json.dumps(name)}: {json.dumps(value)}}}'


def jobs_page(view_texts: list[str], next_cursor: str | None) -> str:
    return '{"jobs": [' + ", ".join(view_texts) + '], "next_cursor": ' + json.dumps(next_cursor) + "}"


def encode_cursor(view_text: str) -> str:
    """An opaque cursor for the page after this row (its id: ids are time-ordered)."""
    return base64.urlsafe_b64encode(uuid.UUID(json.loads(view_text)["id"]).bytes).decode().rstrip("=")


def decode_cursor(cursor: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        return uuid.UUID(bytes=raw)
    except (ValueError, TypeError, binascii.Error):
        raise ApiError(422, "invalid_query", "cursor is not one this API gave out") from None


def parse_job_id(text: str) -> uuid.UUID:
    """Any id that is not a UUID names no job: 404, never a database error."""
    try:
        if len(text) > 64:
            raise ValueError
        return uuid.UUID(text)
    except ValueError:
        raise ApiError(404, "not_found", "no such job") from None


def parse_request_id(text: str) -> uuid.UUID:
    try:
        if len(text) > 64:
            raise ValueError
        return uuid.UUID(text)
    except ValueError:
        raise ApiError(404, "not_found", "no such request") from None
