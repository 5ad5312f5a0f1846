"""What the spark-submit script and ``manage.py lonnymq_spark_export`` share: flags, input
reading, the progress line and the summary. No Django here (the script runs without it)."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from .export import ExportProgress, ExportResult, export
from .writer import ExportError, check_database

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
}


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The export flags (both entry points add their own way of naming the database)."""
    parser.add_argument(
        "--input", required=True, help="Parquet, CSV (with a header) or JSON-lines file or directory"
    )
    parser.add_argument(
        "--format",
        choices=sorted(set(FORMATS.values())),
        help="input format (default: from the --input extension)",
    )
    parser.add_argument("--queue", required=True, help="queue the messages go to")
    parser.add_argument("--channel-col", required=True, help="column holding each row's channel (tenant)")
    parser.add_argument(
        "--payload-col", help="column holding the payload (default: all other columns as JSON)"
    )
    parser.add_argument(
        "--dedup-col", help="column holding each row's dedup key (default: derived from the row)"
    )
    parser.add_argument(
        "--run-at-col", help="timestamp column (or ms since the epoch) to schedule each message"
    )
    parser.add_argument(
        "--export-id", help="mixed into derived dedup keys; a new id enqueues the same rows again"
    )
    parser.add_argument("--batch-size", type=_positive, default=1000, help="rows per enqueue call and commit")
    parser.add_argument(
        "--cost",
        type=_positive,
        default=1,
        help="tokens of the rate limits each message takes (enqueue(cost=))",
    )
    parser.add_argument(
        "--slots",
        type=_positive,
        default=1,
        help="slots of the caps each message takes while it runs (enqueue(slots=))",
    )
    parser.add_argument("--partitions", type=_positive, help="repartition the input into N partitions first")
    parser.add_argument("--master", help="Spark master (default: spark-submit's, or local[*])")
    parser.add_argument(
        "--progress-interval", type=_seconds, default=1.0, help="seconds between progress lines"
    )


def input_format(path: str, given: str | None = None) -> str:
    """``parquet``, ``csv`` or ``json``: ``given``, or from the path's extension."""
    if given:
        return given
    for suffix in reversed(PurePath(path.rstrip("/")).suffixes):
        if suffix.lower() in FORMATS:
            return FORMATS[suffix.lower()]
    raise ExportError(
        f"cannot tell the format of {path!r} from its extension; "
        f"use one of {', '.join(sorted(FORMATS))} or pass --format"
    )


def read_input(spark: SparkSession, path: str, fmt: str | None = None) -> DataFrame:
    """The data set at ``path`` (Parquet, CSV with a header row, or JSON lines)."""
    kind = input_format(path, fmt)
    reader = spark.read
    if kind == "csv":
        return reader.option("header", True).option("inferSchema", True).csv(path)
    if kind == "json":
        return reader.json(path)
    return reader.parquet(path)


def spark_session(master: str | None = None) -> SparkSession:
    """The active session, or a new one (spark-submit's master, else ``master`` or local[*])."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Our own progress lines replace Spark's console progress bar.
    builder = SparkSession.builder.appName("lonnymq-export").config("spark.ui.showConsoleProgress", "false")
    if master:
        builder = builder.master(master)
    return builder.getOrCreate()


class ProgressPrinter:
    """Prints one line per report: rows written so far, new messages, and the rates."""

    def __init__(self, write: Callable[[str], Any]):
        self.write = write
        self.last_rows = 0
        self.last_time = 0.0

    def __call__(self, progress: ExportProgress) -> None:
        window = progress.elapsed - self.last_time
        recent = (progress.rows_written - self.last_rows) / window if window > 0 else 0.0
        self.last_rows, self.last_time = progress.rows_written, progress.elapsed
        self.write(
            f"  {progress.elapsed:6.1f} s  {progress.rows_written:>11,} rows written  "
            f"{progress.enqueued:>11,} enqueued  {recent:>9,.0f} rows/s now  "
            f"{progress.rate:>9,.0f} rows/s overall"
        )


def summary(path: str, queue: str, result: ExportResult, seconds: float) -> str:
    rate = result.rows_seen / seconds if seconds > 0 else 0.0
    return (
        f"Exported {path} into queue {queue!r}: {result.rows_seen:,} rows seen, "
        f"{result.enqueued:,} enqueued, "
        f"{result.duplicates:,} duplicates (already enqueued) in {seconds:.1f} s ({rate:,.0f} rows/s)"
    )


def run(
    options: dict[str, Any], dsn: str, write: Callable[[str], Any], **export_options: Any
) -> ExportResult:
    """Read ``options["input"]`` and export it, printing progress and a summary with ``write``."""
    if not os.path.exists(options["input"]):
        raise ExportError(f"--input {options['input']!r} does not exist")
    check_database(dsn)  # a refused connection fails here, before a JVM starts
    spark = spark_session(options.get("master"))
    df = read_input(spark, options["input"], options.get("format"))
    if options.get("partitions"):
        df = df.repartition(options["partitions"])
    write(f"Exporting {options['input']} into queue {options['queue']!r} ...")
    started = time.monotonic()
    result = export(
        df,
        queue=options["queue"],
        channel_col=options["channel_col"],
        payload_col=options.get("payload_col"),
        dedup_col=options.get("dedup_col"),
        run_at_col=options.get("run_at_col"),
        export_id=options.get("export_id"),
        batch_size=options.get("batch_size") or 1000,
        cost=options.get("cost") or 1,
        slots=options.get("slots") or 1,
        dsn=dsn,
        on_progress=ProgressPrinter(write),
        progress_interval=options.get("progress_interval") or 1.0,
        **export_options,
    )
    write(summary(options["input"], options["queue"], result, time.monotonic() - started))
    return result
