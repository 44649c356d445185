"""Loads jobfeed's SQL: the named queries the Python side runs (sql/queries.sql),
the migrations and the function files."""

from __future__ import annotations

import functools
import importlib.resources
import re
from pathlib import Path

SQL_DIR = Path(str(importlib.resources.files("jobfeed") / "sql"))
_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


@functools.cache
def queries() -> dict[str, str]:
    """name -> SQL text, from the '-- name: x' blocks of sql/queries.sql."""
    text = (SQL_DIR / "queries.sql").read_text()
    parts = _NAME.split(text)
    return {name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2])}


def query(name: str) -> str:
    return queries()[name]


def migrations() -> list[tuple[int, str, str]]:
    """(number, file name, text) of sql/migrations/NNNN_*.sql, in order."""
    found = []
    for path in sorted((SQL_DIR / "migrations").glob("[0-9][0-9][0-9][0-9]_*.sql")):
        found.append((int(path.name[:4]), path.name, path.read_text()))
    return found


_TOKEN = re.compile(r"""
      (?P<string>'(?:[^']|'')*'|"(?:[^"]|"")*")      # literals and quoted names: kept as they are
    | (?P<gap>(?:\s+|--[^\n]*|/\*.*?\*/)+)           # white space and comments: one space
    """, re.VERBOSE | re.DOTALL)


def normalize(text: str) -> str:
    """SQL without its comments and with white space collapsed, so that editing a
    comment or re-indenting is not a schema change. Function bodies ($$...$$)
    are SQL or PL/pgSQL, which share these comment rules, so the scan goes
    through them."""
    return _TOKEN.sub(lambda m: m.group("string") or " ", text).strip()


def function_files() -> list[tuple[str, str]]:
    """(file name, text) of sql/functions/*.sql, in the order they must run."""
    return [(p.name, p.read_text()) for p in sorted((SQL_DIR / "functions").glob("*.sql"))]
