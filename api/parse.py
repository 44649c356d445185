"""Numbers from clients, parsed strictly: ASCII digits only, bounded length.
str.isdigit() also accepts '²' and '٣', on which int() raises, and int() of a
5,000-digit string is slow and then raises: either was a 500."""

from __future__ import annotations


def digits(text: str | None, max_len: int = 18) -> int | None:
    """The whole number `text` spells in ASCII digits (at most max_len), else None."""
    if not text or len(text) > max_len or not text.isascii() or not text.isdigit():
        return None
    return int(text)
