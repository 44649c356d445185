"""What a submission may be: the checks every entry point (HTTP API, command
line) makes before the database makes them again, so that each answers bad
input the same way, with the same code."""

from __future__ import annotations

from urllib.parse import urlsplit

import json
from typing import Any

from .limits import MAX_TARGET_BYTES
from .tasks import registry


class InvalidSubmission(ValueError):
    """A submission refused before it reaches the database: an HTTP status, a
    stable code and a message for people."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def _no_constants(name: str) -> Any:
    # NaN and Infinity are not JSON, and PostgreSQL would refuse them later.
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every caller (json.loads with an option builds a new one per call).
JSON_DECODER = json.JSONDecoder(parse_constant=_no_constants)


def parse_payload(text: str) -> dict:
    """A payload given as JSON text (the command line's --payload)."""
    try:
        payload = JSON_DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidSubmission(400, "invalid_json", f"the payload is not valid JSON: {str(exc)[:200]}") from None
    return check_payload(payload)


def storable(text: str) -> bool:
    """PostgreSQL text holds neither NUL nor lone surrogates."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_payload(payload: object) -> dict:
    if not isinstance(payload, dict):
        raise InvalidSubmission(422, "invalid_payload", "payload must be a JSON object")
    return payload


def check_submission(kind: object, target: object, payload: object) -> tuple[str, str, dict]:
    """(kind, target, payload) when they may be submitted, else InvalidSubmission:
    the shapes, the target's size and the kind's own validate() when this
    process has loaded the kind (the database checks the payload's size and
    whether the kind exists)."""
    if not isinstance(kind, str):
        raise InvalidSubmission(422, "invalid_request", "kind must be a string")
    if not kind or not storable(kind):
        raise InvalidSubmission(422, "unknown_kind", f"unknown kind {kind!r}")
    if not isinstance(target, str) or not storable(target) \
            or not 1 <= len(target.encode("utf-8")) <= MAX_TARGET_BYTES:
        raise InvalidSubmission(422, "invalid_target", f"target must be a string of 1 to {MAX_TARGET_BYTES} bytes")
    payload = check_payload(payload)
    spec = registry.get(kind)
    if spec is not None and spec.validate is not None:
        try:
            spec.validate(payload)
        except (ValueError, TypeError) as exc:
            # TypeError too: a validate() that compares or converts a value of
            # the wrong type fails this way, and the payload is what is wrong.
            raise InvalidSubmission(422, "invalid_payload", str(exc) or "payload refused by its kind") from None
    return kind, target, payload


def host_allowed(url: str, hosts: tuple[str, ...]) -> bool:
    """A notify_url: http(s) to one of the allowed host names (JOBFEED_WEBHOOK_HOSTS, any port)."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(host) and host in hosts
