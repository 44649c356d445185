"""Numbers from clients, parsed strictly: ASCII digits only, bounded length
(settings.digits: str.isdigit() also accepts '²' and '٣', on which int()
raises, and int() of a 5,000-digit string is slow and then raises: either was
a 500)."""

from __future__ import annotations

from jobfeed.worker.settings import SettingError, digits, parse_duration

from .errors import ApiError

__all__ = ["digits", "seconds"]


def seconds(value: str, name: str) -> float:
    """A query parameter's time (?wait=, ?grace=): a duration like 30s, or a
    number of seconds; 0 or more, unbounded (the caller clamps). A 422
    invalid_query otherwise."""
    text = value.strip()
    try:
        plain = text.isascii() and text.replace(".", "", 1).isdigit()  # isdigit() alone takes '²'
        return float(text) if plain else parse_duration(text, name, zero=True, most=None)
    except SettingError:
        raise ApiError(422, "invalid_query", f"{name}: {value!r} is not a duration (write e.g. 30s)") from None
