"""``export()``: a Spark DataFrame becomes queue messages, one per row, exactly once in effect.

The driver checks the columns and the database, lets Spark build each row's JSON payload and
dedup key (JVM code, no Python per field), then runs the partition writer
(:mod:`django_lonnymq.spark.writer`) on every partition. PySpark is imported only when
``export()`` runs, so the writer can be used (and tested) without it.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql as pgsql

from .. import bounds
from .writer import (
    Columns,
    ExportError,
    Fault,
    WriterConfig,
    _scrub,
    check_database,
    describe_dsn,
    run_partition,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

# Rows whose dedup key is derived get this prefix, so they never collide with keys a program
# passes to enqueue() by hand.
DERIVED_KEY_PREFIX = "spark:"
# Hex digits of the sha256 kept in a derived key: 32 = 128 bits. A collision (two different
# rows sharing a key, so one is dropped as a duplicate) needs about 2**64 keys in one channel
# within the dedup window; the shorter key keeps lonnymq_dedup's primary key smaller.
DERIVED_KEY_HEX_DIGITS = 32
# Separates the hashed fields; it cannot occur in JSON text produced by to_json.
_SEP = "\x1f"
# Spark options that make the JSON text, and so the derived keys, independent of session
# settings: timestamps in UTC, null fields kept as null (not dropped).
_JSON_OPTIONS = {"timeZone": "UTC", "ignoreNullFields": "false"}


@dataclass(frozen=True)
class ExportResult:
    """What an export did.

    ``rows_seen``: rows read by the tasks that succeeded. ``enqueued``: messages those tasks
    created. ``duplicates``: rows whose dedup key already had a message, so nothing was
    inserted: rows of an earlier run, rows repeated in the data (same key), and rows that a
    failed attempt of the same task had committed before Spark retried it.
    ``enqueued + duplicates == rows_seen`` always.
    """

    rows_seen: int
    enqueued: int
    duplicates: int


@dataclass(frozen=True)
class ExportProgress:
    """Rows of committed chunks so far (every task attempt, retries included), and time."""

    rows_written: int
    enqueued: int
    elapsed: float

    @property
    def rate(self) -> float:
        """Rows per second since the export started."""
        return self.rows_written / self.elapsed if self.elapsed > 0 else 0.0


def export(
    df: DataFrame,
    *,
    queue: str,
    channel_col: str,
    payload_col: str | None = None,
    dedup_col: str | None = None,
    run_at_col: str | None = None,
    dsn: str | None = None,
    batch_size: int = 1000,
    export_id: str | None = None,
    max_attempts: int = 5,
    priority_step_ms: int = 1000,
    tolerance_ms: int = 50,
    max_payload_bytes: int = 1_000_000,
    on_duplicate: str = "skip",
    cost: int = 1,
    slots: int = 1,
    on_progress: Callable[[ExportProgress], None] | None = None,
    progress_interval: float = 1.0,
    _fault: Fault | None = None,
) -> ExportResult:
    """Enqueue one message per row of ``df`` into ``queue``; the channel is ``channel_col``.

    - ``payload_col``: a column of JSON text, or a struct/map/array column; by default the
      payload is a JSON object of every other column (all but the channel and run-at ones).
    - ``dedup_col``: each row's dedup key (string or integer, 1-200 characters). Without it
      the key is ``"spark:"`` + the first 128 bits (32 hex digits) of
      ``sha256(export_id, channel, payload, run_at)``: a re-run of the
      same rows with the same ``export_id`` enqueues nothing again, and identical rows
      collapse into one message. Use a new ``export_id`` for a run that must enqueue again.
    - ``run_at_col``: a timestamp, or integer milliseconds since the epoch; null means now.
    - ``dsn``: libpq DSN or URL (default: ``DATABASE_URL``). The executors connect with it.
    - ``on_progress`` is called about every ``progress_interval`` seconds from a thread that
      counts committed chunks (LISTEN/NOTIFY), so it sees progress while tasks still run.

    - ``on_duplicate``: what a row whose key already has a message does, as in
      ``enqueue(on_duplicate=...)``: ``"skip"`` (default: nothing), ``"replace"`` or
      ``"update"`` (the key's waiting message takes the row's payload; a key whose message
      ran gets a new one, so a re-run is no longer a no-op).
    - ``cost``: the tokens of the channel's and the queue's rate limits each message's
      release takes, as in ``enqueue(cost=...)`` (1 to 1,000,000; more than a bucket's burst
      is refused with the chunk that holds it).
    - ``slots``: the slots of the channel's and the queue's ``max_concurrency`` each message
      takes while it runs, as in ``enqueue(slots=...)`` (1 to 1,000,000; more than a cap is
      refused with the chunk that holds it). One figure for the export: a row's size is not
      known one by one.

    Keys stay in ``lonnymq_dedup`` for ``LONNYMQ_DEDUP_WINDOW`` (one day by default): re-runs
    within that window are safe. Raises :class:`ExportError` naming the column or the cause.
    """
    _check_arguments(queue, batch_size, export_id, max_attempts)
    if isinstance(cost, bool) or not isinstance(cost, int) or not 1 <= cost <= 1_000_000:
        raise ExportError(f"cost must be an integer between 1 and 1000000, got {cost!r}")
    if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= 1_000_000:
        raise ExportError(f"slots must be an integer between 1 and 1000000, got {slots!r}")
    if on_duplicate not in bounds.DEDUP_MODES:
        raise ExportError(f"on_duplicate must be skip, replace or update, got {on_duplicate!r}")
    if dsn is None:
        dsn = os.environ.get("DATABASE_URL")
        if not dsn:
            raise ExportError("no dsn given and DATABASE_URL is not set: say which database to export to")

    projected, columns = _project(df, channel_col, payload_col, dedup_col, run_at_col, export_id or "")
    try:
        rdd = projected.rdd
    except Exception as exc:  # Spark Connect: no RDD API, no Python code on executors
        raise ExportError(
            "export() needs a classic PySpark session (DataFrame.rdd); Spark Connect has none"
        ) from exc
    check_database(dsn)  # before any task runs: a refused connection writes nothing

    progress_channel = f"lonnymq_spark_{uuid.uuid4().hex[:20]}" if on_progress else None
    config = WriterConfig(
        dsn=dsn,
        queue=queue,
        batch_size=batch_size,
        default_max_attempts=max_attempts,
        priority_step_ms=priority_step_ms,
        tolerance_ms=tolerance_ms,
        max_payload_bytes=max_payload_bytes,
        on_duplicate=on_duplicate,
        cost=cost,
        slots=slots,
        columns=columns,
        progress_channel=progress_channel,
        fault=_fault,
    )
    listener = None
    if on_progress is not None and progress_channel is not None:
        listener = _ProgressListener(dsn, progress_channel, on_progress, progress_interval)
        listener.start_listening()
    spark_context = rdd.context
    spark_context.setJobDescription(f"lonnymq export into queue {queue!r}")
    try:
        counts = rdd.mapPartitionsWithIndex(functools.partial(run_partition, config)).collect()
    except Exception as exc:
        error = _unwrap(exc)
        if error is None:
            raise
        raise error from exc
    finally:
        spark_context.setJobDescription(None)  # type: ignore[arg-type]
        if listener is not None:
            listener.stop()
    rows_seen = sum(rows for rows, _ in counts)
    enqueued = sum(new for _, new in counts)
    return ExportResult(rows_seen=rows_seen, enqueued=enqueued, duplicates=rows_seen - enqueued)


# ---------------------------------------------------------------------------------------
# Checking the arguments and the columns, on the driver, before anything is written
# ---------------------------------------------------------------------------------------


def _check_arguments(queue: Any, batch_size: Any, export_id: Any, max_attempts: Any) -> None:
    if not isinstance(queue, str) or not 1 <= len(queue) <= 100:
        raise ExportError(f"queue must be a string of 1 to 100 characters, got {queue!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= 100_000:
        raise ExportError(f"batch_size must be an integer between 1 and 100000, got {batch_size!r}")
    if export_id is not None and not isinstance(export_id, str):
        raise ExportError(f"export_id must be a string or None, got {export_id!r}")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not 1 <= max_attempts <= 1000:
        raise ExportError(f"max_attempts must be an integer between 1 and 1000, got {max_attempts!r}")


def _field(df: DataFrame, name: str, role: str) -> DataType:
    fields = {f.name: f.dataType for f in df.schema.fields}
    if name in fields:
        return fields[name]
    # A different case first, then spelling near misses (tenant_di for tenant_id).
    near = [c for c in fields if c.lower() == name.lower()] or difflib.get_close_matches(
        name, list(fields), n=3
    )
    hint = f" (did you mean {' or '.join(repr(c) for c in near)}?)" if near else ""
    listed = ", ".join(fields) or "none"
    raise ExportError(
        f"{role} {name!r} is not a column of the data frame{hint}; its columns are: {listed}", column=name
    )


def _unsupported_in_json(data_type: DataType) -> str | None:
    """Name of the first type in ``data_type`` that has no faithful JSON form, or None."""
    from pyspark.sql import types

    if isinstance(data_type, types.StructType):
        for f in data_type.fields:
            bad = _unsupported_in_json(f.dataType)
            if bad:
                return bad
        return None
    if isinstance(data_type, types.ArrayType):
        return _unsupported_in_json(data_type.elementType)
    if isinstance(data_type, types.MapType):
        return _unsupported_in_json(data_type.keyType) or _unsupported_in_json(data_type.valueType)
    simple = (
        types.StringType,
        types.BooleanType,
        types.NumericType,
        types.DateType,
        types.TimestampType,
        types.TimestampNTZType,
        types.NullType,
    )
    if isinstance(data_type, simple):
        return None
    return data_type.simpleString()


def _not_json(column: str, bad: str) -> ExportError:
    hint = " (encode it first, e.g. base64(col))" if bad == "binary" else " (cast or drop it first)"
    return ExportError(
        f"column {column!r} holds {bad} values, which are not JSON-serializable{hint}", column=column
    )


def _project(
    df: DataFrame,
    channel_col: str,
    payload_col: str | None,
    dedup_col: str | None,
    run_at_col: str | None,
    export_id: str,
) -> tuple[DataFrame, Columns]:
    """``df`` as ``(channel, payload, dedup_key, run_at_ms)`` columns, built by Spark."""
    from pyspark.sql import functions as sf
    from pyspark.sql import types

    integral = (types.ByteType, types.ShortType, types.IntegerType, types.LongType)

    channel_type = _field(df, channel_col, "channel_col")
    if not isinstance(channel_type, (types.StringType, *integral)):
        raise ExportError(
            f"channel_col {channel_col!r} must be a string or integer column, "
            f"got {channel_type.simpleString()}",
            column=channel_col,
        )
    channel: Column = sf.col(channel_col).cast("string")

    payload: Column
    payload_name: str
    if payload_col is not None:
        payload_type = _field(df, payload_col, "payload_col")
        payload_name = payload_col
        if isinstance(payload_type, types.StringType):
            payload = sf.col(payload_col)  # JSON text, checked by the server (and explained)
        elif isinstance(payload_type, (types.StructType, types.MapType, types.ArrayType)):
            bad = _unsupported_in_json(payload_type)
            if bad:
                raise _not_json(payload_col, bad)
            payload = sf.to_json(sf.col(payload_col), _JSON_OPTIONS)
        else:
            raise ExportError(
                f"payload_col {payload_col!r} must hold JSON text (string) or a struct, map or array, "
                f"got {payload_type.simpleString()}",
                column=payload_col,
            )
    else:
        left_out = {channel_col, run_at_col}
        rest = [f for f in df.schema.fields if f.name not in left_out]
        for f in rest:
            bad = _unsupported_in_json(f.dataType)
            if bad:
                raise _not_json(f.name, bad)
        payload_name = "payload (all other columns)"
        # Sorted names: the JSON text, and so the derived key, does not depend on column order.
        names = sorted(f.name for f in rest)
        payload = sf.to_json(sf.struct(*[sf.col(n) for n in names]), _JSON_OPTIONS) if names else sf.lit("{}")

    run_at: Column
    if run_at_col is not None:
        run_at_type = _field(df, run_at_col, "run_at_col")
        if isinstance(run_at_type, types.TimestampType):
            run_at = sf.unix_millis(sf.col(run_at_col))
        elif isinstance(run_at_type, integral):
            run_at = sf.col(run_at_col).cast("long")
        else:
            raise ExportError(
                f"run_at_col {run_at_col!r} must be a timestamp (with time zone) or integer "
                f"milliseconds since the epoch, got {run_at_type.simpleString()}",
                column=run_at_col,
            )
    else:
        run_at = sf.lit(None).cast("long")

    dedup: Column
    if dedup_col is not None:
        if export_id:
            raise ExportError(
                "export_id only goes into derived dedup keys; with dedup_col the key is that column's "
                "value, so a new export_id would not enqueue the rows again"
            )
        dedup_type = _field(df, dedup_col, "dedup_col")
        if not isinstance(dedup_type, (types.StringType, *integral)):
            raise ExportError(
                f"dedup_col {dedup_col!r} must be a string or integer column, "
                f"got {dedup_type.simpleString()}",
                column=dedup_col,
            )
        dedup = sf.col(dedup_col).cast("string")
        dedup_name = dedup_col
    else:
        content = sf.concat_ws(
            _SEP, sf.lit(export_id), channel, payload, sf.coalesce(run_at.cast("string"), sf.lit(""))
        )
        digest = sf.substring(sf.sha2(content, 256), 1, DERIVED_KEY_HEX_DIGITS)
        dedup = sf.concat(sf.lit(DERIVED_KEY_PREFIX), digest)
        dedup_name = "derived dedup key"

    projected = df.select(
        channel.alias("channel"),
        payload.alias("payload"),
        dedup.alias("dedup_key"),
        run_at.alias("run_at_ms"),
    )
    columns = Columns(channel=channel_col, payload=payload_name, dedup=dedup_name, run_at=run_at_col)
    return projected, columns


# ---------------------------------------------------------------------------------------
# Errors from the executors, and progress while they run
# ---------------------------------------------------------------------------------------

_EXECUTOR_ERROR = re.compile(r"ExportError: (?P<message>[^\n]+)")


def _unwrap(exc: BaseException) -> ExportError | None:
    """The executor's :class:`ExportError` inside Spark's wrapping of a failed job, if any."""
    match = _EXECUTOR_ERROR.search(str(exc))
    if match is None:
        return None
    return ExportError(match["message"].strip())


class _ProgressListener:
    """Sums the writers' per-chunk NOTIFY messages and reports them every interval."""

    def __init__(self, dsn: str, channel: str, callback: Callable[[ExportProgress], None], interval: float):
        self.dsn = dsn
        self.channel = channel
        self.callback = callback
        self.interval = interval
        self.rows = 0
        self.enqueued = 0
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="lonnymq-export-progress", daemon=True)

    def start_listening(self) -> None:
        self._thread.start()
        self._ready.wait(timeout=30)
        if self._error is not None:
            reason = _scrub(" ".join(str(self._error).split()), self.dsn)
            raise ExportError(f"cannot listen for progress on {describe_dsn(self.dsn)}: {reason}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            conn = psycopg.connect(self.dsn, autocommit=True, application_name="lonnymq-spark-progress")
        except psycopg.Error as exc:
            self._error = exc
            self._ready.set()
            return
        try:
            conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(self.channel)))
            self._ready.set()
            next_report = time.monotonic() + self.interval
            while not self._stop.is_set():
                self._receive(conn, min(0.2, self.interval))
                if time.monotonic() >= next_report:
                    next_report += self.interval
                    self._report()
            # The last chunks committed just before the job ended: collect them, report once more.
            self._receive(conn, 0.3)
            self._report()
        except Exception:  # progress is best effort; the export's own result is what counts
            pass
        finally:
            conn.close()

    def _receive(self, conn: psycopg.Connection[Any], timeout: float) -> None:
        for notify in conn.notifies(timeout=timeout):
            rows, new = notify.payload.split()
            self.rows += int(rows)
            self.enqueued += int(new)

    def _report(self) -> None:
        self.callback(ExportProgress(self.rows, self.enqueued, time.monotonic() - self.started))
