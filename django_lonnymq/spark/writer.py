"""The partition writer: rows in, queue messages out, with plain psycopg and no Django.

Each Spark task (or any other producer of rows) runs :func:`write_rows` on one iterator of
``(channel, payload_json, dedup_key, run_at_ms)`` tuples. Rows go to the database in chunks
of ``batch_size``: one call of ``lonnymq_enqueue_many_v4`` per chunk (the named query
``enqueue_many``, the same function Django's ``enqueue_many`` calls), one commit per chunk.

Why a re-run enqueues nothing twice: every row carries a dedup key, and a chunk's messages
commit together with their keys in ``lonnymq_dedup``. A chunk is either fully committed (its
keys exist, so a retried task or a re-run job gets the existing ids back and inserts nothing)
or not at all (nothing to duplicate).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import conninfo, errors

from .. import bounds, jsontext
from ..exceptions import InvalidArgument, LonnyMQError, translate
from ..sql import binary_arrays, query

# The chunk transaction's own inserts: rows whose xmin is this transaction's id. The enqueue
# function runs without subtransactions (no EXCEPTION blocks), so every message it inserted
# carries the top-level xid; an id that came back for a repeated dedup key belongs to an
# older transaction (or to no row at all, when that message was already acked). A message an
# older transaction enqueued and this one replaced or updated (on_duplicate) carries this
# xid too, but its enqueued_at (the older transaction's start) is not this one's now().
NEW_MESSAGES = """
SELECT count(*) FROM lonnymq_message m
 WHERE m.id = ANY(%(ids)s::bigint[]) AND m.xmin = pg_current_xact_id()::xid AND m.enqueued_at = now()
"""
# Delivered only if the chunk commits, so a listener counts committed rows exactly.
NOTIFY_PROGRESS = "SELECT pg_notify(%(channel)s, %(payload)s)"
# The export needs the v1 function; a database without it was not migrated.
ENQUEUE_MANY_EXISTS = "SELECT to_regproc('lonnymq_enqueue_many_v4') IS NOT NULL"

# A row the enqueue function refused names itself items[i].<argument> (i from 0 in the chunk).
ITEM_FIELD = re.compile(r"^items\[(?P<index>\d+)\]\.(?P<argument>\w+)$")

# SQLSTATEs after which the whole chunk transaction rolled back and may simply run again.
RETRYABLE = {"40001", "40P01"}
RETRIES = 5


class ExportError(LonnyMQError):
    """A row, a column or the database refused the export; the message names which.

    Chunks committed before the error stay committed; their dedup keys make a re-run skip
    them, so fixing the cause and running the same export again is safe.
    """

    def __init__(self, message: str, *, column: str | None = None):
        self.column = column
        super().__init__(message)


class InjectedFaultError(RuntimeError):
    """Raised by :class:`Fault` to simulate a task that dies mid-partition (tests only)."""


@dataclass(frozen=True)
class Fault:
    """Test hook: after committing ``after_chunks`` chunks, fail once per marker file.

    The task that manages to delete ``marker`` raises; every other task (and the retry of the
    failed one) carries on, so exactly one attempt dies after committing part of its rows.
    """

    marker: str
    after_chunks: int = 1

    def maybe_fail(self, chunks_committed: int) -> None:
        if chunks_committed != self.after_chunks:
            return
        try:
            os.remove(self.marker)
        except FileNotFoundError:
            return
        raise InjectedFaultError(f"injected failure after committing {chunks_committed} chunk(s)")


@dataclass(frozen=True)
class Columns:
    """Names of the source columns, so errors name what the user wrote."""

    channel: str = "channel"
    payload: str = "payload"
    dedup: str = "dedup_key"
    run_at: str | None = None


@dataclass(frozen=True)
class WriterConfig:
    """Everything an executor needs; small and picklable (it travels with each task)."""

    dsn: str
    queue: str
    batch_size: int = 1000
    default_max_attempts: int = 5
    priority_step_ms: int = 1000
    tolerance_ms: int = 50
    max_payload_bytes: int = 1_000_000
    on_duplicate: str = "skip"
    cost: int = 1
    slots: int = 1
    columns: Columns = field(default_factory=Columns)
    progress_channel: str | None = None
    fault: Fault | None = None


@dataclass
class Counts:
    """Rows a writer saw and the messages it created; the rest were duplicates."""

    rows_seen: int = 0
    enqueued: int = 0

    @property
    def duplicates(self) -> int:
        return self.rows_seen - self.enqueued


# ---------------------------------------------------------------------------------------
# Connections: clear errors that name the server but never the password
# ---------------------------------------------------------------------------------------


def describe_dsn(dsn: str) -> str:
    """``host:port/dbname as user`` of a libpq DSN or URL, without its password."""
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "an unparsable DSN"
    host = params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "localhost"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    dbname = params.get("dbname") or os.environ.get("PGDATABASE") or "(default database)"
    user = params.get("user") or os.environ.get("PGUSER")
    return f"{host}:{port}/{dbname}" + (f" as user {user}" if user else "")


def _scrub(text: str, dsn: str) -> str:
    try:
        password = conninfo.conninfo_to_dict(dsn).get("password")
    except psycopg.ProgrammingError:
        password = None
    return text.replace(str(password), "***") if password else text


def connect(dsn: str) -> psycopg.Connection[Any]:
    """A connection for one writer, or an :class:`ExportError` naming the server."""
    try:
        given = conninfo.conninfo_to_dict(dsn)
        defaults: dict[str, Any] = {"application_name": "lonnymq-spark-export", "connect_timeout": 10}
        conn = psycopg.connect(dsn, **{k: v for k, v in defaults.items() if k not in given})
    except psycopg.Error as exc:
        reason = _scrub(" ".join(str(exc).split()), dsn)
        raise ExportError(f"cannot connect to PostgreSQL at {describe_dsn(dsn)}: {reason}") from None
    # The enqueue function's no-lock fast path is argued for READ COMMITTED (docs/locking.md).
    conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
    return conn


def check_database(dsn: str) -> None:
    """Fail early (before any row is read) when the server refuses us or lacks the schema."""
    with connect(dsn) as conn:
        if not conn.execute(ENQUEUE_MANY_EXISTS).fetchone()[0]:  # type: ignore[index]
            raise ExportError(
                f"the database at {describe_dsn(dsn)} has no lonnymq_enqueue_many_v4 function; "
                "run `python manage.py migrate` against it first"
            )


# ---------------------------------------------------------------------------------------
# The writer
# ---------------------------------------------------------------------------------------


def write_rows(
    config: WriterConfig, rows: Iterable[Sequence[Any]], *, partition: int | None = None
) -> Counts:
    """Enqueue ``(channel, payload_json, dedup_key, run_at_ms)`` rows in chunks; return counts.

    ``payload_json`` is JSON text; ``run_at_ms`` (ms since the epoch) may be None (now).
    Every row needs a dedup key: that is what makes a retry or a re-run safe.
    """
    counts = Counts()
    chunks = 0
    where = f"partition {partition}" if partition is not None else "the input"
    conn: psycopg.Connection[Any] | None = None
    batch = config.batch_size
    try:
        iterator = iter(rows)
        while True:
            chunk = list(itertools.islice(iterator, batch))
            if not chunk:
                break
            if conn is None:  # lazily: an empty partition opens no connection
                conn = connect(config.dsn)
            counts.enqueued += _write_chunk(conn, config, chunk, counts.rows_seen, where)
            counts.rows_seen += len(chunk)
            chunks += 1
            if config.fault is not None:
                config.fault.maybe_fail(chunks)
    finally:
        if conn is not None:
            conn.close()
    return counts


def run_partition(
    config: WriterConfig, index: int, rows: Iterator[Sequence[Any]]
) -> Iterator[tuple[int, int]]:
    """``rdd.mapPartitionsWithIndex`` entry point: one ``(rows_seen, enqueued)`` per partition."""
    counts = write_rows(config, rows, partition=index)
    yield counts.rows_seen, counts.enqueued


def _write_chunk(
    conn: psycopg.Connection[Any], config: WriterConfig, chunk: list[Sequence[Any]], offset: int, where: str
) -> int:
    """One enqueue call and one commit; returns how many messages it created."""
    channels, payloads, keys, run_ats = (list(column) for column in zip(*chunk, strict=True))
    _check_chunk(config, chunk, channels, payloads, keys, offset, where)
    params = {
        "queue": config.queue,
        "channels": channels,
        "payloads": payloads,
        "run_at_ms": None if run_ats.count(None) == len(run_ats) else run_ats,
        "delay_ms": None,
        "priorities": None,
        "dedup_keys": keys,
        "on_duplicate": None if config.on_duplicate == "skip" else [config.on_duplicate] * len(keys),
        "max_attempts": None,
        "default_max_attempts": config.default_max_attempts,
        "priority_step_ms": config.priority_step_ms,
        "tolerance_ms": config.tolerance_ms,
        "costs": None if config.cost == 1 else [config.cost] * len(keys),
        "slots": None if config.slots == 1 else [config.slots] * len(keys),
    }
    for attempt in range(RETRIES + 1):
        try:
            with conn.cursor() as cursor:
                cursor.execute(binary_arrays(query("enqueue_many")), params)
                ids = cursor.fetchone()[0]  # type: ignore[index]
                cursor.execute(NEW_MESSAGES, {"ids": ids})
                created = int(cursor.fetchone()[0])  # type: ignore[index]
                if config.progress_channel:
                    cursor.execute(
                        NOTIFY_PROGRESS,
                        {"channel": config.progress_channel, "payload": f"{len(chunk)} {created}"},
                    )
            conn.commit()
            return created
        except psycopg.Error as exc:
            if not conn.closed:
                try:
                    conn.rollback()
                except psycopg.Error:
                    pass
            if exc.sqlstate in RETRYABLE and attempt < RETRIES:
                time.sleep(0.05 * 2**attempt)
                continue
            raise _explain(exc, config, chunk, offset, where) from exc
    raise AssertionError("unreachable")


def _row_error(
    config: WriterConfig,
    chunk: list[Sequence[Any]],
    index: int,
    offset: int,
    where: str,
    column: str,
    problem: str,
) -> ExportError:
    row = chunk[index]
    preview = row[1] if isinstance(row[1], str) else repr(row[1])
    if len(preview) > 120:
        preview = preview[:117] + "..."
    return ExportError(
        f"row {offset + index} of {where}: column {column!r} {problem} (payload {preview})", column=column
    )


def _check_chunk(
    config: WriterConfig,
    chunk: list[Sequence[Any]],
    channels: list[Any],
    payloads: list[Any],
    keys: list[Any],
    offset: int,
    where: str,
) -> None:
    """Cheap whole-chunk checks (C-speed scans); a row-level hunt only when one fails."""
    names = config.columns

    def first(predicate: Any) -> int:
        return next(i for i, row in enumerate(chunk) if predicate(row))

    if None in channels:
        raise _row_error(
            config,
            chunk,
            first(lambda r: r[0] is None),
            offset,
            where,
            names.channel,
            "is null; every row needs a channel",
        )
    if max(map(len, channels)) > bounds.MAX_CHANNEL_NAME or min(map(len, channels)) < 1:
        i = first(lambda r: not 1 <= len(r[0]) <= bounds.MAX_CHANNEL_NAME)
        raise _row_error(
            config,
            chunk,
            i,
            offset,
            where,
            names.channel,
            f"must be 1 to {bounds.MAX_CHANNEL_NAME} characters, got {len(channels[i])}",
        )
    if "\x00" in "".join(channels):
        raise _row_error(
            config,
            chunk,
            first(lambda r: "\x00" in r[0]),
            offset,
            where,
            names.channel,
            "contains a NUL character, which PostgreSQL text refuses",
        )
    if jsontext.has_lone_surrogate("".join(channels)):
        raise _row_error(
            config,
            chunk,
            first(lambda r: jsontext.has_lone_surrogate(r[0])),
            offset,
            where,
            names.channel,
            "contains a lone surrogate (invalid Unicode)",
        )
    if None in payloads:
        raise _row_error(
            config,
            chunk,
            first(lambda r: r[1] is None),
            offset,
            where,
            names.payload,
            "is null; a message needs a JSON payload",
        )
    if jsontext.suspicious("\n".join(payloads)):  # one scan of the chunk, then row by row
        for i, payload in enumerate(payloads):
            why = jsontext.problem(payload)
            if why is not None:
                raise _row_error(config, chunk, i, offset, where, names.payload, why)
    limit = config.max_payload_bytes
    if max(map(len, payloads)) * 4 > limit:  # only long texts can be too many bytes
        for i, payload in enumerate(payloads):
            size = len(payload.encode("utf-8"))
            if size > limit:
                raise _row_error(
                    config,
                    chunk,
                    i,
                    offset,
                    where,
                    names.payload,
                    f"is {size} bytes as JSON, more than the limit of {limit}",
                )
    deepest = bounds.MAX_PAYLOAD_DEPTH
    if max(map(len, payloads)) > 2 * deepest:  # only long texts can be too deep
        for i, payload in enumerate(payloads):
            depth = jsontext.deeper_than(payload, deepest)
            if depth is not None:
                raise _row_error(
                    config,
                    chunk,
                    i,
                    offset,
                    where,
                    names.payload,
                    f"is nested {depth} levels deep, more than the {deepest} allowed (the root is "
                    "level 0): a worker could not decode it",
                )
    stored_limit = bounds.MAX_STORED_JSONB
    if max(map(len, payloads)) * 8 + 16 > stored_limit:  # only long texts can take that much stored
        for i, payload in enumerate(payloads):
            if len(payload) * 8 + 16 > stored_limit:
                stored = jsontext.jsonb_size(payload)
                if stored > stored_limit:
                    raise _row_error(
                        config,
                        chunk,
                        i,
                        offset,
                        where,
                        names.payload,
                        f"takes {stored} bytes as stored by PostgreSQL (jsonb), more than the {stored_limit} "
                        "allowed",
                    )
    if None in keys:
        raise _row_error(
            config,
            chunk,
            first(lambda r: r[2] is None),
            offset,
            where,
            names.dedup,
            "is null; every row needs a dedup key so a re-run cannot enqueue it twice",
        )
    if max(map(len, keys)) > bounds.MAX_DEDUP_KEY or min(map(len, keys)) < 1:
        i = first(lambda r: not 1 <= len(r[2]) <= bounds.MAX_DEDUP_KEY)
        raise _row_error(
            config,
            chunk,
            i,
            offset,
            where,
            names.dedup,
            f"must be 1 to {bounds.MAX_DEDUP_KEY} characters as a dedup key, got {len(keys[i])}",
        )


def _explain(
    exc: psycopg.Error, config: WriterConfig, chunk: list[Sequence[Any]], offset: int, where: str
) -> Exception:
    """Turn a database error about one row into an error naming the row and its column."""
    names = config.columns
    if isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None:
        reason = _scrub(" ".join(str(exc).split()), config.dsn)
        return ExportError(f"lost the connection to PostgreSQL at {describe_dsn(config.dsn)}: {reason}")
    if isinstance(exc, errors.DataError):
        # Spark's to_json writes what jsonb may still refuse: NUL characters; a payload
        # column of JSON text may hold anything. Find the first payload the server refuses.
        for i, row in enumerate(chunk):
            payload = row[1]
            if "\\u0000" in payload:
                return _row_error(
                    config,
                    chunk,
                    i,
                    offset,
                    where,
                    names.payload,
                    "contains a NUL character (\\u0000), which PostgreSQL jsonb refuses",
                )
            try:
                json.loads(payload)
            except ValueError as bad:
                return _row_error(
                    config, chunk, i, offset, where, names.payload, f"is not valid JSON ({bad})"
                )
    typed = translate(exc)
    item = ITEM_FIELD.match(typed.field) if isinstance(typed, InvalidArgument) else None
    column = {"channel": names.channel, "payload": names.payload, "dedup_key": names.dedup}.get(
        item["argument"] if item else ""
    )
    if isinstance(typed, InvalidArgument) and item and column and int(item["index"]) < len(chunk):
        # The row and its column, as the checks above name them.
        problem = typed.rule if typed.value is None else f"{typed.rule}, got {typed.value}"
        return _row_error(config, chunk, int(item["index"]), offset, where, column, problem)
    if typed is not None:
        text = str(typed)
        return ExportError(f"{where}, rows {offset}-{offset + len(chunk) - 1}: {text}")
    return exc
