"""The SQL that ships with the app: the live schema, the migrations' history, named queries.

- ``schema.sql``: every table, index and function as a fresh ``migrate`` installs it now and
  the app calls it. The file to read, and the one to edit (docs/sql.md).
- ``superseded.sql``: the functions ``migrate`` still installs but no named statement or live
  function calls any more, kept for the previous release's code during a rolling deploy; each
  says which release may drop it. :func:`schema` is the two files together.
- ``migrations/NNNN_name.up.sql`` (and ``.down.sql`` where the step creates something): what
  each released migration ran, frozen (tests/migrations/test_schema.py pins their checksums).
  A later migration that changes a function carries its new body; its reverse reinstalls the
  earlier body from the earlier file with :func:`restore`, so no body is copied into a down
  file.
- ``queries.sql`` / ``stats.sql``: the named statements the Python layer runs.

Python only looks statements up by name; none are built from strings elsewhere.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_ARRAY_PARAM = re.compile(r"%\((\w+)\)s(::\w+\[\])")
# One function definition: the comment lines right above it, CREATE [OR REPLACE] FUNCTION,
# up to the end of its $$-quoted body.
_FUNCTION = re.compile(
    r"(?P<comment>(?:^--(?! ---)[^\n]*\n)*)"
    r"^CREATE (?:OR REPLACE )?FUNCTION (?P<name>\w+)\((?P<rest>.*?\$\$.*?\$\$[^;]*;)",
    re.MULTILINE | re.DOTALL,
)

SCHEMA_FILE = "schema.sql"
SUPERSEDED_FILE = "superseded.sql"
# What a database migrated from zero holds, in the order to run them.
SCHEMA_FILES = (SCHEMA_FILE, SUPERSEDED_FILE)
MIGRATIONS_DIR = "migrations"


def read(filename: str) -> str:
    """The text of one SQL file in this package (``"schema.sql"``, ``"migrations/0001_initial.up.sql"``)."""
    return resources.files(__package__).joinpath(filename).read_text(encoding="utf-8")


def schema() -> str:
    """Every table, index and function a fresh ``migrate`` installs: the live schema, then the
    superseded functions (one text, to run in one transaction)."""
    return "\n".join(read(filename) for filename in SCHEMA_FILES)


def migration(name: str, direction: str = "up") -> str:
    """The SQL a released migration runs, e.g. ``migration("0001_initial", "down")``."""
    return read(f"{MIGRATIONS_DIR}/{name}.{direction}.sql")


def migration_files() -> list[str]:
    """Every released migration SQL file, by name, in order."""
    folder = resources.files(__package__).joinpath(MIGRATIONS_DIR)
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))


def functions(text: str) -> dict[str, str]:
    """The function definitions in a SQL text, by name (comment above included)."""
    found: dict[str, str] = {}
    for match in _FUNCTION.finditer(text):
        name = match["name"]
        if name in found:
            raise ValueError(f"function {name!r} is defined twice in one file")
        found[name] = f"{match['comment']}CREATE FUNCTION {name}({match['rest']}"
    return found


def restore(migration_name: str, *names: str) -> str:
    """``CREATE OR REPLACE`` statements that put back functions as an earlier migration installed them.

    A migration that changes a function reverses with this instead of a copy of the old body.
    """
    defined = functions(migration(migration_name))
    missing = [n for n in names if n not in defined]
    if missing:
        raise KeyError(f"{migration_name} defines no function {', '.join(missing)}")
    return "\n".join(
        defined[n].replace(f"CREATE FUNCTION {n}(", f"CREATE OR REPLACE FUNCTION {n}(", 1) for n in names
    )


def restore_previous(migration_name: str, *names: str) -> str:
    """``CREATE OR REPLACE`` statements that put back functions as the migrations before
    ``migration_name`` last installed them: the reverse of a step that changed them."""
    earlier = sorted({f.split(".")[0] for f in migration_files() if f.endswith(".up.sql")})
    earlier = [m for m in earlier if m < migration_name]
    statements = []
    for name in names:
        source = next((m for m in reversed(earlier) if name in functions(migration(m))), None)
        if source is None:
            raise KeyError(f"no migration before {migration_name} defines {name}")
        statements.append(restore(source, name))
    return "\n".join(statements)


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
