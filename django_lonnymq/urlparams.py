"""Query-string values the admin and the dashboard pass to the database, made safe first.

A URL can carry what no queue name or id can: a NUL, a lone surrogate, "²" (which
``str.isdigit()`` accepts and ``int()`` refuses), a number beyond bigint. Sent as is, each is a
database error and an HTTP 500; here each simply matches nothing.
"""

from __future__ import annotations

from .bounds import MAX_ID


def storable(value: str | None) -> str | None:
    """A URL parameter PostgreSQL can compare with text: None when it holds a NUL or a lone
    surrogate (no name can hold one, so nothing matches it)."""
    if value is None or "\x00" in value:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


def an_id(value: str) -> int | None:
    """A URL parameter as a row id: ASCII digits within bigint, else None ("²".isdigit() is
    True, int("²") is not a number)."""
    if not (value.isascii() and value.isdigit()):
        return None
    number = int(value)
    return number if 1 <= number <= MAX_ID else None
