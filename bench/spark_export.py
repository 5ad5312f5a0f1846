"""Spark export throughput: rows/s of ``django_lonnymq.spark.export`` against a plain INSERT.

    python -m bench.spark_export            # 100k and 1M rows, 3 runs each (several minutes)
    python -m bench.spark_export --quick    # 10k and 100k rows

Every figure is the median of the runs. Each run exports the same generated rows (1,000
tenants, dedup on: derived keys) from 2 Spark partitions, batch 1,000, into emptied queue
tables, and in the same run writes the very same rows (channel, payload, dedup key, from the
same Spark projection) with a plain multi-row ``INSERT`` per chunk into a table with no
functions, triggers, foreign keys or secondary indexes. The ratio is export / plain INSERT
within each run (the median of the runs' ratios).
Two more columns say where the time goes: the same Spark job with the database left out
(rows only pass through the Python workers), and the partition writer fed from Python lists
by 2 threads, no Spark (the database work of the export alone).

The table also gives the size of ``lonnymq_dedup``'s primary key after the export (its keys
are the derived ``"spark:"`` keys, which is what grows with the data set).

The database is ``DATABASE_URL`` (default: postgres://postgres@127.0.0.1:5432/lq_bench_spark);
it is created and migrated when needed, and dropped and created again when its queue functions
differ from the ones in ``django_lonnymq/sql/`` (a database migrated before a function was
changed in place would otherwise measure the old code). Do not point this at a database you
care about: the queue tables are truncated before every run.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo
from psycopg import sql as pgsql

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_spark"
QUEUE = "bench_spark"
TENANTS = 1000
PARTITIONS = 2
BATCH = 1000
PLAIN_TABLE = "bench_spark_plain"
TRUNCATE = (
    "TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_dead_message, lonnymq_channel, lonnymq_wake, {plain}"
    " RESTART IDENTITY"
)
CREATE_PLAIN = """
CREATE TABLE IF NOT EXISTS {plain} (
    id bigserial PRIMARY KEY, channel text NOT NULL, payload jsonb NOT NULL, dedup_key text NOT NULL)
"""


# ---------------------------------------------------------------------------------------
# Set-up: the database, the Spark session, the rows
# ---------------------------------------------------------------------------------------


_FUNCTION = re.compile(
    r"CREATE\s+(OR\s+REPLACE\s+)?FUNCTION\s+(\w+)\s*\(.*?\bAS\s+\$(\w*)\$(.*?)\$\3\$", re.S | re.I
)


def stale_functions(dsn: str) -> list[str]:
    """Queue functions whose body in the database differs from django_lonnymq/sql/schema.sql."""
    from django_lonnymq import sql

    expected: dict[str, str] = {}
    for name, definition in sql.functions(sql.read(sql.SCHEMA_FILE)).items():
        expected[name.lower()] = _FUNCTION.search(definition).group(4)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT proname, prosrc FROM pg_proc WHERE proname = ANY(%s)", (list(expected),)
        ).fetchall()
    installed = {name: body for name, body in rows}
    return sorted(name for name, body in expected.items() if installed.get(name) != body)


def prepare_database(url: str, log: Callable[[str], None]) -> str:
    """Create and migrate the bench database if needed; returns its DSN.

    A database whose functions are older than the SQL files (0001 was migrated before a
    function was changed in place) is dropped and created again, so the bench measures the
    code in this checkout.
    """
    params = conninfo.conninfo_to_dict(url)
    dbname = str(params.get("dbname") or "lq_bench_spark")
    admin = conninfo.make_conninfo(url, dbname="postgres")
    env = {**os.environ, "DATABASE_URL": url}
    for attempt in range(2):
        with psycopg.connect(admin, autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone() is None:
                conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(dbname)))
        subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
        )
        stale = stale_functions(url)
        if not stale:
            break
        if attempt:
            raise SystemExit(f"bench: {dbname} still has stale functions after re-creating it: {stale}")
        log(
            f"{dbname}: functions older than django_lonnymq/sql ({', '.join(stale)}); re-creating the database"
        )
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(pgsql.SQL("DROP DATABASE {} WITH (FORCE)").format(pgsql.Identifier(dbname)))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(pgsql.SQL(CREATE_PLAIN).format(plain=pgsql.Identifier(PLAIN_TABLE)))
    return url


def dedup_index_bytes(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute("SELECT pg_relation_size('lonnymq_dedup_pkey')").fetchone()[0])  # type: ignore[index]


def empty_tables(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(pgsql.SQL(TRUNCATE).format(plain=pgsql.Identifier(PLAIN_TABLE)))
        conn.execute("VACUUM ANALYZE lonnymq_channel")


def spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(f"local[{PARTITIONS}]")
        .appName("lonnymq-bench-spark-export")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def uploads(spark: Any, rows: int) -> Any:
    """``rows`` uploads over 1,000 tenants, generated in ``PARTITIONS`` partitions."""
    from pyspark.sql import functions as sf

    return spark.range(0, rows, numPartitions=PARTITIONS).select(
        sf.concat(sf.lit("tenant-"), (sf.col("id") % TENANTS).cast("string")).alias("tenant"),
        sf.concat(sf.lit("s3://uploads/file-"), sf.col("id").cast("string"), sf.lit(".pdf")).alias("file"),
        (sf.abs(sf.xxhash64(sf.col("id"))) % 50_000_000).alias("size_bytes"),
        sf.lit("transcode").alias("kind"),
    )


def projected(df: Any) -> Any:
    """The exact ``(channel, payload, dedup_key, run_at_ms)`` rows ``export()`` writes."""
    from django_lonnymq.spark.export import _project

    rows, _ = _project(df, "tenant", None, None, None, "")
    return rows


# ---------------------------------------------------------------------------------------
# What each run measures
# ---------------------------------------------------------------------------------------


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def run_export(df: Any, dsn: str) -> None:
    from django_lonnymq.spark import export

    result = export(df, queue=QUEUE, channel_col="tenant", dsn=dsn, batch_size=BATCH)
    assert result.enqueued == result.rows_seen, result


def plain_partition(dsn: str, index: int, rows: Iterator[Sequence[Any]]) -> Iterator[int]:
    """One multi-row INSERT per chunk, one commit per chunk: the baseline writer."""
    head = f"INSERT INTO {PLAIN_TABLE} (channel, payload, dedup_key) VALUES "
    statements: dict[int, str] = {}
    written = 0
    with psycopg.connect(dsn) as conn:
        chunk: list[Any] = []
        for row in rows:
            chunk.extend(row[:3])
            if len(chunk) >= 3 * BATCH:
                n = len(chunk) // 3
                statement = statements.get(n) or statements.setdefault(n, head + ",".join(["(%s,%s,%s)"] * n))
                conn.execute(statement, chunk)
                conn.commit()
                written += n
                chunk = []
        if chunk:
            n = len(chunk) // 3
            conn.execute(head + ",".join(["(%s,%s,%s)"] * n), chunk)
            conn.commit()
            written += n
    yield written


def run_plain(rows: Any, dsn: str, expected: int) -> None:
    written = sum(rows.rdd.mapPartitionsWithIndex(functools.partial(plain_partition, dsn)).collect())
    assert written == expected, written


def drain_partition(index: int, rows: Iterator[Sequence[Any]]) -> Iterator[int]:
    """The Spark and Python part alone: rows reach the worker and are batched, no database."""
    n = 0
    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= BATCH:
            columns = [list(c) for c in zip(*chunk, strict=True)]  # as the writer splits a chunk
            n += len(columns[0])
            chunk = []
    yield n + len(chunk)


def run_spark_only(rows: Any, expected: int) -> None:
    assert sum(rows.rdd.mapPartitionsWithIndex(drain_partition).collect()) == expected


def run_writer_only(data: list[tuple[str, str, str, None]], dsn: str) -> None:
    from django_lonnymq.spark.writer import WriterConfig, write_rows

    config = WriterConfig(dsn=dsn, queue=QUEUE, batch_size=BATCH)
    halves = [data[i::PARTITIONS] for i in range(PARTITIONS)]
    threads = [threading.Thread(target=write_rows, args=(config, half)) for half in halves]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


# ---------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------


def measure(spark: Any, dsn: str, rows: int, runs: int, log: Callable[[str], None]) -> dict[str, float]:
    df = uploads(spark, rows)
    rows_df = projected(df)
    data = [tuple(r) for r in rows_df.collect()] if rows <= 1_000_000 else []
    figures: dict[str, list[float]] = {
        "export": [],
        "plain": [],
        "spark": [],
        "writer": [],
        "index": [],
        "ratio": [],
    }
    for run in range(1, runs + 1):
        empty_tables(dsn)
        figures["export"].append(rows / timed(lambda: run_export(df, dsn)))
        figures["index"].append(dedup_index_bytes(dsn) / 2**20)
        figures["plain"].append(rows / timed(lambda: run_plain(rows_df, dsn, rows)))
        figures["ratio"].append(figures["export"][-1] / figures["plain"][-1])
        figures["spark"].append(rows / timed(lambda: run_spark_only(rows_df, rows)))
        if data:
            empty_tables(dsn)
            figures["writer"].append(rows / timed(lambda: run_writer_only(data, dsn)))
        log(
            f"  {rows:>9,} rows, run {run}/{runs}: "
            + ", ".join(
                f"{k} {v[-1]:,.1f} MB"
                if k == "index"
                else f"{k} {v[-1]:.2f}x"
                if k == "ratio"
                else f"{k} {v[-1]:,.0f}/s"
                for k, v in figures.items()
                if v
            )
        )
    return {k: statistics.median(v) for k, v in figures.items() if v}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated row counts")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="10k and 100k rows")
    args = parser.parse_args(argv)
    sizes = [10_000, 100_000] if args.quick else [int(s) for s in args.sizes.split(",")]

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    dsn = prepare_database(os.environ.get("DATABASE_URL", DEFAULT_URL), log)
    spark = spark_session()
    with psycopg.connect(dsn) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
    log(
        f"Spark {spark.version}, PostgreSQL {version}, {os.cpu_count()} cores, {PARTITIONS} partitions, "
        f"batch {BATCH}, {TENANTS} tenants, medians of {args.runs} runs"
    )
    spark.range(1000).count()  # warm the JVM up before the first timed job
    results = {rows: measure(spark, dsn, rows, args.runs, log) for rows in sizes}
    empty_tables(dsn)

    print()
    print(
        f"Spark export, {PARTITIONS} partitions, batch {BATCH}, dedup on, {TENANTS} tenants "
        f"(medians of {args.runs} runs, rows/s)"
    )
    header = (
        f"{'rows':>10} | {'export':>9} | {'plain INSERT':>12} | {'ratio':>6} | "
        f"{'Spark only, no DB':>17} | {'writer only, no Spark':>21} | {'dedup index':>11}"
    )
    print(header)
    print("-" * len(header))
    for rows, f in results.items():
        writer = f"{f['writer']:>21,.0f}" if "writer" in f else f"{'-':>21}"
        print(
            f"{rows:>10,} | {f['export']:>9,.0f} | {f['plain']:>12,.0f} | "
            f"{f['ratio']:>5.2f}x | "
            f"{f['spark']:>17,.0f} | {writer} | {f['index']:>8,.1f} MB"
        )
    spark.stop()


if __name__ == "__main__":
    main()
