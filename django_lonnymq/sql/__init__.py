"""The SQL that ships with the app: migration files and the named queries.

Statements live in ``.sql`` files beside this module so they can be read, diffed and run
with psql; Python only looks them up by name.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_ARRAY_PARAM = re.compile(r"%\((\w+)\)s(::\w+\[\])")


def read(filename: str) -> str:
    """The text of one SQL file in this package."""
    return resources.files(__package__).joinpath(filename).read_text(encoding="utf-8")


QUERY_FILES = ("queries.sql", "stats.sql")


@functools.cache
def queries(filename: str | None = None) -> dict[str, str]:
    """Named queries of one file, or of every file in :data:`QUERY_FILES`, parsed once."""
    named: dict[str, str] = {}
    for name_of_file in (filename,) if filename else QUERY_FILES:
        parts = _NAME.split(read(name_of_file))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in named:
                raise ValueError(f"query {name!r} is defined twice ({name_of_file})")
            lines = [line for line in body.strip().splitlines() if not line.lstrip().startswith("--")]
            named[name] = "\n".join(lines).strip()
    return named


def query(name: str) -> str:
    """One named query; a KeyError names the missing query."""
    try:
        return queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in {', '.join(QUERY_FILES)}") from None


@functools.cache
def binary_arrays(statement: str) -> str:
    """``statement`` with its array parameters (``%(x)s::type[]``) sent in binary (``%(x)b``).

    psycopg quotes a text array element by element in Python: about 27 us per JSON payload,
    28 ms for a 1,000-row batch, more than the server spends storing it. In binary the same
    array costs under 1 ms. Only for a psycopg 3 cursor that binds on the server.
    """
    return _ARRAY_PARAM.sub(r"%(\1)b\2", statement)
