"""The worker's control connection: one psycopg connection (autocommit, LISTENing for
wake-ups) on which the control thread runs every queue call.

Statements run through :func:`django_lonnymq.db.run` (the one database seam). A lost
connection is told apart from a statement that failed on a healthy one: the first is
reconnected (back-off while the database is down), the second backed off.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from django.db import connections
from psycopg.types.json import set_json_loads

from .. import arguments, bounds, db, jsontext, statements
from ..conf import SYNCHRONOUS_COMMIT_VALUES, settings
from ..exceptions import LonnyMQError, SchemaMissing
from .stats import Stats

logger = logging.getLogger("django_lonnymq.worker")

T = TypeVar("T")

DB_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)
# Any error a statement can raise: a lost connection is told apart by the connection's state.
STATEMENT_ERRORS = (psycopg.Error, LonnyMQError)
# Back-off after a statement fails for a reason other than a lost connection.
_ERROR_BACKOFF_FIRST = 0.5
_ERROR_BACKOFF_MAX = 30.0


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def root_error(exc: BaseException) -> BaseException:
    """The database error under a typed one; a missing schema keeps its hint (migrate)."""
    if isinstance(exc, LonnyMQError) and exc.__cause__ and not isinstance(exc, SchemaMissing):
        return exc.__cause__
    return exc


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """How a statement failed on a healthy connection: ("failed" or "was cancelled", and
    the error's type, SQLSTATE and first line)."""
    root = root_error(exc)
    sqlstate = getattr(root, "sqlstate", None)
    kind = "was cancelled" if isinstance(root, psycopg.errors.QueryCanceled) else "failed"
    return kind, f"{type(root).__name__}{f' {sqlstate}' if sqlstate else ''}: {first_line(root)}"


def backoff(previous: float) -> float:
    """The next back-off: doubled, capped, with up to 25% jitter so workers do not align."""
    base = min(previous * 2, _ERROR_BACKOFF_MAX) if previous else _ERROR_BACKOFF_FIRST
    return base * random.uniform(0.75, 1.0)


class ControlConnection:
    """The control thread's connection (``conn``: None while the database is down)."""

    def __init__(self, using: str, name: str, stats: Stats, stopping: threading.Event):
        self.using = using
        self.name = arguments.name(
            "name", name, bounds.MAX_WORKER_NAME
        )  # in application_name; renamed by the worker's row
        self.stats = stats
        self.stopping = stopping
        self.conn: psycopg.Connection[Any] | None = None
        # Set by the first connection: every later one is a reconnect.
        self.connected_before = False
        self._error_backoff = 0.0

    # -- connecting --------------------------------------------------------------------

    def connect(self) -> psycopg.Connection[Any]:
        params = dict(connections[self.using].get_connection_params())
        for key in ("cursor_factory", "context", "server_side_binding", "prepare_threshold"):
            params.pop(key, None)
        options = params.pop("options", "") or ""
        # A killed worker's server backend notices the dead client within a second.
        options += " -c client_connection_check_interval=1000 -c lock_timeout=0"
        # The worker's own commits (leases, acks, retries): "on" by default, so what the failure
        # model promises (a lease or ack survives a server crash) holds; "off" lets a crash undo
        # the last few hundred ms of them (those messages run again) for a faster commit.
        synchronous_commit = settings.WORKER_SYNCHRONOUS_COMMIT
        if synchronous_commit not in SYNCHRONOUS_COMMIT_VALUES:  # lonnymq.E230 says so
            synchronous_commit = "on"
        options += f" -c synchronous_commit={synchronous_commit}"
        # Its own statement timeout: a role or database default of a few ms would cancel
        # cold-cache dequeues forever.
        options += f" -c statement_timeout={settings.ms('WORKER_STATEMENT_TIMEOUT')}"
        conn = psycopg.connect(
            **params,
            options=options.strip(),
            autocommit=True,
            application_name=f"lonnymq-worker {self.name}"[:63],
            connect_timeout=5,
            # A silent network partition is noticed within about a minute.
            keepalives=1,
            keepalives_idle=30,
            keepalives_interval=10,
            keepalives_count=3,
        )
        # Payloads are UTF-8 text from the server: decoded straight, without json.loads'
        # sniffing of the encoding of bytes (a fifth of the decoding time). One Python cannot
        # decode (nested too deep) becomes a value its message fails with, alone: raised, it
        # would fail the whole dequeue, after the batch was leased.
        set_json_loads(jsontext.decode, conn)
        statements.listen(on=conn)
        statements.listen_cancels(on=conn)
        return conn

    def ensure(self) -> bool:
        """Connect unless connected, retrying with a back-off while the database is down;
        False when the worker is stopping before it could."""
        delay = 0.5
        while self.conn is None or self.conn.closed:
            try:
                self.conn = self.connect()
                if self.connected_before:
                    # Counted here, whoever noticed the loss (the loop, or a duty that
                    # handles its own errors, such as the schedule ticker).
                    self.stats.reconnects += 1
                if delay > 0.5 or self.connected_before:
                    logger.warning("worker %s connected to the database again", self.name)
                self.connected_before = True
                return True
            except (*DB_ERRORS, OSError) as exc:
                # OSError: this process is out of a resource (too many open files, memory), not
                # the database: the same back-off, saying which.
                self.conn = None
                if self.stopping.is_set():
                    return False
                if isinstance(exc, DB_ERRORS):
                    logger.error("database unavailable (%s); retrying in %.1fs", first_line(exc), delay)
                else:
                    logger.error(
                        "cannot connect to the database: this process is out of a resource (%s: %s); "
                        "retrying in %.1fs",
                        type(exc).__name__,
                        exc,
                        delay,
                    )
                self.stopping.wait(delay)
                delay = min(delay * 2, 30.0)
        return True

    # psycopg's own loaders decode jsonb (worker/lifecycle.py's Executor).
    json_as_text = False

    def is_lost(self, exc: BaseException) -> bool:
        """A broken connection is reconnected; any other failed statement is backed off.

        A cancelled statement (statement_timeout, QueryCanceled) and a lock timeout are
        OperationalErrors too, but the connection is fine: reconnecting at once would
        only repeat them, dozens of times a second.
        """
        conn = self.conn
        if conn is None or conn.closed or conn.broken:
            return True
        if isinstance(exc, psycopg.InterfaceError):
            return True
        root = root_error(exc)
        if not isinstance(root, psycopg.OperationalError):
            return False
        # The client's own connection errors carry no SQLSTATE; the server's say 08xxx
        # (connection exception) or 57P01-57P03 (shutting down, crashed, starting).
        sqlstate = getattr(root, "sqlstate", None)
        return sqlstate is None or sqlstate.startswith("08") or sqlstate in {"57P01", "57P02", "57P03"}

    def raises(self, exc: BaseException) -> bool:
        """A recording that failed (``worker/lifecycle.py``) goes up when the connection is
        lost (the outcome is sent again after reconnecting); otherwise it is logged and the
        worker goes on with its other messages."""
        return isinstance(exc, DB_ERRORS) and self.is_lost(exc)

    def lost(self, exc: BaseException) -> None:
        """Drop the connection (the next :meth:`ensure` reconnects)."""
        logger.warning("lost the database connection (%s); reconnecting", first_line(exc))
        self.close()

    def failed(self, what: str, exc: BaseException) -> None:
        """Handle a statement error of the loop: reconnect when the connection is lost, else
        log it and back off (doubling until :meth:`succeeded`)."""
        if self.is_lost(exc):
            self.lost(exc)
            return
        self.stats.statement_errors += 1
        self._error_backoff = backoff(self._error_backoff)
        kind, detail = describe_failure(exc)
        logger.error("%s %s (%s); backing off %.1fs", what, kind, detail, self._error_backoff)
        self.stopping.wait(self._error_backoff)

    def succeeded(self) -> None:
        """A pass of the loop went through: the next failure backs off from the start."""
        self._error_backoff = 0.0

    def close(self) -> None:
        try:
            if self.conn is not None:
                self.conn.close()
        finally:
            self.conn = None

    # -- statements --------------------------------------------------------------------

    def run(self, name: str, params: db.Params = None, *, prepare: bool = True) -> list[db.Row]:
        """Every row of a named statement (prepared once per connection, unless ``prepare``
        is false: a utility statement such as VACUUM cannot be prepared)."""
        return db.run(self.conn, name, params, prepare=prepare)

    def value(self, name: str, params: db.Params = None) -> Any:
        """The first column of the first row of a named statement (None: no row)."""
        rows = self.run(name, params)
        return rows[0][0] if rows else None

    def quietly(self, what: str, call: Callable[[], list[T]]) -> list[T]:
        """A statement that must never stop the worker: a failure is logged (a lost
        connection is raised, for the worker to reconnect)."""
        try:
            return call()
        except Exception as exc:
            if self.is_lost(exc):
                raise
            logger.warning("worker %s could not %s: %s", self.name, what, exc)
            return []
