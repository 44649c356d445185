"""Text bound for an operator's terminal. A job's target, a worker's id or a
handler's progress message is whoever wrote it: its control characters (an
escape sequence that retitles the window or clears the screen, a newline
that forges a line) are shown escaped, never sent to the terminal."""

from __future__ import annotations


def shown(value: object) -> str:
    """str(value), each character str.isprintable() refuses as Python escapes it
    (\\x1b, \\n, \\u202e)."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
