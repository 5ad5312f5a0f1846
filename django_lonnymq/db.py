"""The one seam to the database: every named statement of ``sql/*.sql`` runs here.

Callers name a statement (``sql.query``) and pass its parameters. This module decides the
rest in one place:

- **which connection**: a Django alias (``using``: the caller's connection and transaction),
  or a psycopg connection the caller holds (the worker's control connection);
- **how it binds**: Django's psycopg backend binds on the client; a statement with array
  parameters, or a project that turns prepared statements on, binds on the server, its
  arrays in binary (:func:`sql.binary_arrays`);
- **what an error becomes**: the queue's SQLSTATEs and named constraints become typed
  exceptions (:func:`exceptions.sql_errors`).

Nothing else in the package calls ``execute`` (tests/house/test_layers.py keeps it so); the
Spark writer, which runs on executors without Django, keeps its own connection code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import connections

from . import sql
from .conf import settings
from .exceptions import InvalidArgument, sql_errors

try:
    import psycopg
except ImportError:  # psycopg2 users keep the client-side binding path
    psycopg = None  # type: ignore[assignment]

Params = Mapping[str, Any] | None
Row = tuple[Any, ...]


def alias(using: str | None) -> str:
    """The database alias of a call: ``using``, or ``LONNYMQ_DATABASE`` when None."""
    if using is None:
        return str(settings.DATABASE)
    if not isinstance(using, str) or using not in connections.settings:
        raise InvalidArgument(
            "using", f"must name a database alias in DATABASES ({', '.join(connections)})", using
        )
    return using


def connection(using: str | None) -> Any:
    """Django's connection wrapper for ``using``, connected (as ``cursor()`` would leave it)."""
    wrapper = connections[alias(using)]
    wrapper.close_if_health_check_failed()
    wrapper.ensure_connection()
    return wrapper


# ---------------------------------------------------------------------------------------
# On a Django connection: the caller's connection and transaction
# ---------------------------------------------------------------------------------------


def rows(name: str, params: Params = None, *, using: str | None = None, arrays: bool = False) -> list[Row]:
    """Every row of a named statement on ``using``'s connection, in the caller's transaction.

    ``arrays=True`` for a statement with array parameters: they go in binary, bound on the
    server (psycopg quotes a text array element by element in Python: about 2.5 ms per 100
    JSON payloads). A project that turns prepared statements on (``OPTIONS
    ["prepare_threshold"]``) gets server-side binding everywhere: psycopg then prepares each
    statement once per connection, sparing the server its parsing and planning (about 50 us
    of a single enqueue's 700). Otherwise Django's client-side binding stays, which keeps
    transaction-mode poolers working.
    """
    wrapper = connection(using)
    cursor = _cursor(wrapper, arrays)
    statement = sql.query(name)
    if arrays and _binds_on_server(cursor):
        statement = sql.binary_arrays(statement)
    with sql_errors(), cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description is not None else []


def value(name: str, params: Params = None, *, using: str | None = None, arrays: bool = False) -> Any:
    """The first column of the first row of a named statement (None: no row); see :func:`rows`."""
    found = rows(name, params, using=using, arrays=arrays)
    return found[0][0] if found else None


def models(model: Any, name: str, params: Params = None, *, using: str | None = None) -> list[Any]:
    """A named statement's rows as unsaved-or-loaded instances of ``model`` (``raw()``)."""
    with sql_errors():
        return list(model.objects.using(alias(using)).raw(sql.query(name), params))


def _cursor(wrapper: Any, arrays: bool) -> Any:
    """A cursor through Django's wrapper (error wrapping, query logging), binding on the
    server when arrays go in binary or the project prepares statements."""
    raw_connection = wrapper.connection
    if psycopg is None or not isinstance(raw_connection, psycopg.Connection):
        return wrapper.cursor()
    if not arrays and getattr(raw_connection, "prepare_threshold", None) is None:
        return wrapper.cursor()
    wrapper.validate_thread_sharing()
    raw = psycopg.Cursor(raw_connection)
    return wrapper.make_debug_cursor(raw) if wrapper.queries_logged else wrapper.make_cursor(raw)


def _binds_on_server(cursor: Any) -> bool:
    inner = getattr(cursor, "cursor", cursor)
    return psycopg is not None and type(inner) is psycopg.Cursor


# ---------------------------------------------------------------------------------------
# On a psycopg connection the caller holds (the worker's control connection)
# ---------------------------------------------------------------------------------------


def run(conn: Any, name: str, params: Params = None, *, prepare: bool = True) -> list[Row]:
    """Every row of a named statement on a psycopg connection (prepared once per connection).

    A statement without a result (a DELETE without RETURNING, LISTEN) gives no rows.
    """
    with sql_errors():
        cursor = conn.execute(sql.query(name), params, prepare=prepare)
        return cursor.fetchall() if cursor.description is not None else []


def run_value(conn: Any, name: str, params: Params = None, *, prepare: bool = True) -> Any:
    """The first column of the first row of :func:`run` (None: no row)."""
    found = run(conn, name, params, prepare=prepare)
    return found[0][0] if found else None
