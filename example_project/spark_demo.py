"""The demo's Spark step: a skewed data set of uploads, exported into a queue, drained fairly.

``generate_dataset(path)`` writes Parquet with columns ``tenant`` (the channel), ``file_id``
(unique, a natural dedup key), ``kind``, ``size_bytes`` and ``uploaded_at``. One tenant
(``tenant-0000``) holds half the rows; the other half is spread evenly over the rest, which
is what makes fairness visible when workers drain the queue.

``run_spark_step()`` is what ``make demo`` runs after the fairness demo (example_project/
demo.py; ``--no-spark`` skips it): it writes that data set, exports it into queue ``ingest``
with ``django_lonnymq.spark.export()``, exports it a second time (which must enqueue nothing),
lets burst workers drain the queue (handler ``ingest`` in example_project/tenants/handlers.py
records each job in ``tenants_jobrun``), shows in which order the tenants finished, and checks
that every row ran exactly once and ``django_lonnymq.api.check()`` finds no problem.

    python example_project/spark_demo.py /tmp/uploads.parquet --rows 100000   # data set only
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from django_lonnymq.spark import ExportResult

ROOT = Path(__file__).resolve().parent.parent
BIG_TENANT = "tenant-0000"
KINDS = ["pdf", "video", "image", "spreadsheet", "archive"]

# The Spark step of the demo.
QUEUE = "ingest"
DEFAULT_ROWS = 20_000
DEFAULT_TENANTS = 1000
BIG_SHARE_MARK = 0.10  # "how many small tenants were done when the big one had done 10%"


def generate_dataset(
    path: str,
    rows: int = 100_000,
    tenants: int = 1000,
    *,
    partitions: int = 2,
    spark: SparkSession | None = None,
) -> int:
    """Write ``rows`` uploads over ``tenants`` tenants to ``path`` (Parquet, overwritten).

    Even row numbers belong to the big tenant; odd ones go round robin over the others.
    Deterministic: the same arguments write the same rows. Returns the number of rows.
    """
    if rows < 1 or tenants < 2:
        raise ValueError(f"need rows >= 1 and tenants >= 2, got rows={rows}, tenants={tenants}")
    from pyspark.sql import functions as sf

    from django_lonnymq.spark.cli import spark_session

    spark = spark or spark_session()
    width = max(4, len(str(tenants - 1)))
    ids = spark.range(0, rows, numPartitions=partitions)
    small = sf.lit(1) + (sf.floor(sf.col("id") / 2) % (tenants - 1)).cast("long")
    tenant_number = sf.when(sf.col("id") % 2 == 0, sf.lit(0).cast("long")).otherwise(small)
    kinds = sf.array(*[sf.lit(k) for k in KINDS])
    df = ids.select(
        sf.concat(sf.lit("tenant-"), sf.lpad(tenant_number.cast("string"), width, "0")).alias("tenant"),
        sf.concat(sf.lit("upload-"), sf.col("id").cast("string")).alias("file_id"),
        kinds[(sf.col("id") % len(KINDS)).cast("int")].alias("kind"),
        (sf.abs(sf.xxhash64(sf.col("id"))) % 50_000_000 + 1_000).alias("size_bytes"),
        sf.timestamp_seconds(sf.lit(1_717_200_000) + sf.col("id") % 86_400).alias(
            "uploaded_at"
        ),  # 2024-06-01 UTC
    )
    df.write.mode("overwrite").parquet(path)
    return rows


# ---------------------------------------------------------------------------------------
# The demo's Spark step
# ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _output_to(log: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (file descriptors 1 and 2) to ``log`` meanwhile.

    Used while the JVM starts: it inherits the descriptors, so Spark's start-up warnings and
    its later log lines (and those of its Python workers) go to the log, not to the demo's output.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for d in (fd, *saved):
            os.close(d)


def demo_spark_session(log: Path) -> SparkSession:
    """A local[2] session for the demo: UI off, Python workers on this interpreter, quiet."""
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise RuntimeError(
            "the Spark step needs Java 17 or later (e.g. apt-get install openjdk-17-jre-headless); "
            "or run the demo with --no-spark"
        )
    # The executors' Python workers must import django_lonnymq and psycopg: this venv.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("lonnymq-demo-spark-step")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    with _output_to(log):
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
    return session


def _reset(table: str) -> None:
    """Delete every trace of queue ``ingest`` and its scoreboard rows (nothing else)."""
    from django.db import connection, transaction

    from example_project.demo import forget_queue

    with transaction.atomic(), connection.cursor() as cursor:
        forget_queue(cursor, QUEUE)
        cursor.execute(f"DELETE FROM {table} WHERE queue = %s", [QUEUE])


def _scalar(sql: str, params: list[Any]) -> Any:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def _queued_per_tenant() -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.name, count(*) FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id"
            " WHERE c.queue = %s GROUP BY c.name",
            [QUEUE],
        )
        return dict(cursor.fetchall())


def _export(df: Any, label: str, note: str = "") -> tuple[ExportResult, float]:
    """One export of ``df`` into the queue, with the settings the Django side uses; prints it."""
    from django.db import connection

    from django_lonnymq.conf import settings as lq
    from django_lonnymq.management.commands.lonnymq_spark_export import dsn_from_settings
    from django_lonnymq.spark import export

    started = time.monotonic()
    result = export(
        df,
        queue=QUEUE,
        channel_col="tenant",  # no dedup_col: keys derived from each row ("spark:" + 128 bits)
        dsn=dsn_from_settings(connection.settings_dict),
        max_attempts=lq.MAX_ATTEMPTS,
        priority_step_ms=lq.ms("PRIORITY_STEP"),
        tolerance_ms=lq.ms("WAKE_TOLERANCE"),
        max_payload_bytes=lq.MAX_PAYLOAD_BYTES,
    )
    seconds = time.monotonic() - started
    print(
        f"{label}: {result.rows_seen:,} rows seen, {result.enqueued:,} enqueued, "
        f"{result.duplicates:,} duplicates in {seconds:.1f}s ({result.rows_seen / seconds:,.0f} rows/s{note})",
        flush=True,
    )
    return result, seconds


def _start_workers(count: int, concurrency: int, batch_size: int, logdir: Path) -> list[tuple[Any, Path]]:
    command = [
        sys.executable,
        str(ROOT / "manage.py"),
        "run_queue_worker",
        "--queue",
        QUEUE,
        "--concurrency",
        str(concurrency),
        "--batch-size",
        str(batch_size),
        "--burst",
    ]
    url = os.environ["DATABASE_URL"]
    if "conn_max_age" not in url:  # handler threads keep their connection between jobs
        url += ("&" if "?" in url else "?") + "conn_max_age=600"
    env = dict(os.environ, PYTHONUNBUFFERED="1", DATABASE_URL=url)
    workers = []
    for index in range(count):
        log = logdir / f"ingest-worker-{index + 1}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        workers.append((proc, log))
    return workers


def _drain(
    workers: list[tuple[Any, Path]], expected: dict[str, int], table: str, timeout: float
) -> tuple[bool, float]:
    """Progress every second until the burst workers exit; (finished in time, seconds)."""
    from django.db import connection

    big_total = expected.get(BIG_TENANT, 0)
    small = {t: n for t, n in expected.items() if t != BIG_TENANT}
    small_total = sum(small.values())
    big_w = len(f"{big_total:,}/{big_total:,}")
    small_w = len(f"{small_total:,}/{small_total:,}")
    print(
        f"   time  {BIG_TENANT:>{big_w}}  {'small tenants (rows)':>{max(small_w, 20)}}"
        f"  {'small tenants done':>18}  in flight"
    )
    started = time.monotonic()
    while True:
        time.sleep(1.0)
        running = [p for p, _ in workers if p.poll() is None]
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT tenant, count(DISTINCT message_id) FROM {table} WHERE queue = %s GROUP BY tenant",
                [QUEUE],
            )
            done = dict(cursor.fetchall())
        flying = _scalar(
            "SELECT count(*) FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id"
            " WHERE c.queue = %s AND m.lease_until IS NOT NULL",
            [QUEUE],
        )
        small_done = sum(min(done.get(t, 0), n) for t, n in small.items())
        finished = sum(done.get(t, 0) >= n for t, n in small.items())
        elapsed = time.monotonic() - started
        big = f"{done.get(BIG_TENANT, 0):,}/{big_total:,}"
        rows = f"{small_done:,}/{small_total:,}"
        print(
            f"{elapsed:6.1f}s  {big:>{big_w}}  {rows:>{max(small_w, 20)}}"
            f"  {f'{finished}/{len(small)}':>18}  {flying:9d}",
            flush=True,
        )
        if not running:
            return True, elapsed
        if elapsed > timeout:
            for proc in running:
                proc.terminate()
            for proc in running:
                try:
                    proc.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    proc.kill()
            return False, elapsed


def _fairness(expected: dict[str, int], table: str) -> list[str]:
    """Where each tenant's last job finished; the small ones must not wait for the big one."""
    from django.db import connection

    with connection.cursor() as cursor:
        # position: order of finishing; arrival: order of enqueueing (message id), i.e. the
        # order a first-in-first-out queue would have run them in.
        cursor.execute(
            f"""
            WITH runs AS (
                SELECT tenant, message_id,
                       row_number() OVER (ORDER BY finished_at, id) AS position,
                       dense_rank() OVER (ORDER BY message_id) AS arrival,
                       row_number() OVER (PARTITION BY tenant ORDER BY finished_at, id) AS nth
                  FROM {table} WHERE queue = %s)
            SELECT tenant, max(position), max(arrival),
                   max(position) FILTER (WHERE nth = %s)
              FROM runs GROUP BY tenant
            """,
            [QUEUE, max(1, round(BIG_SHARE_MARK * expected.get(BIG_TENANT, 0)))],
        )
        rows = {tenant: (last, arrival, mark) for tenant, last, arrival, mark in cursor.fetchall()}
    total = sum(expected.values())
    small = [t for t in expected if t != BIG_TENANT]
    if BIG_TENANT not in rows or any(t not in rows for t in small) or not small:
        return []  # missing jobs are reported by the checks
    big_last, big_arrival, big_mark = rows[BIG_TENANT]
    lasts = sorted(rows[t][0] for t in small)
    fifo_lasts = sorted(rows[t][1] for t in small)
    mark_n = max(1, round(BIG_SHARE_MARK * expected[BIG_TENANT]))
    done_at_mark = sum(rows[t][0] < big_mark for t in small)
    print(f"\norder of finishing (#1 = the first of the {total:,} jobs to finish):")
    print(
        f"  {len(small)} small tenants: last job at #{lasts[0]:,} to #{lasts[-1]:,} "
        f"(median #{statistics.median(lasts):,.0f})"
    )
    print(
        f"  {BIG_TENANT}: its {mark_n:,}th job ({BIG_SHARE_MARK:.0%}) at #{big_mark:,}, "
        f"its last at #{big_last:,}"
    )
    print(
        f"  in arrival order (first in, first out) the small tenants' last jobs would have been "
        f"#{fifo_lasts[0]:,} to #{fifo_lasts[-1]:,} (median #{statistics.median(fifo_lasts):,.0f})"
    )
    print(
        f"fairness: {done_at_mark} of {len(small)} small tenants were done before {BIG_TENANT} "
        f"had done {BIG_SHARE_MARK:.0%} of its {expected[BIG_TENANT]:,} rows"
    )
    if done_at_mark < 0.9 * len(small):
        return [
            f"only {done_at_mark} of {len(small)} small tenants finished before {BIG_TENANT} had done "
            f"{BIG_SHARE_MARK:.0%} of its rows: the round robin did not hold"
        ]
    return []


def _checks(expected: dict[str, int], table: str) -> list[str]:
    """Every row ran exactly once, nothing left or dead, the scheduler state is consistent."""
    from django.db import connection

    from django_lonnymq.api import check

    problems: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT tenant, count(*), count(DISTINCT message_id) FROM {table} WHERE queue = %s GROUP BY tenant",
            [QUEUE],
        )
        recorded = {t: (runs, distinct) for t, runs, distinct in cursor.fetchall()}
    wrong = [
        (t, recorded.get(t, (0, 0))[1], n) for t, n in expected.items() if recorded.get(t, (0, 0))[1] != n
    ]
    if wrong:
        short = ", ".join(f"{t} {got} of {n}" for t, got, n in wrong[:5])
        problems.append(f"{len(wrong)} tenant(s) did not have every job recorded once, e.g. {short}")
    twice = sum(runs - distinct for runs, distinct in recorded.values())
    if twice:
        problems.append(f"{twice} job(s) of queue {QUEUE!r} ran more than once")
    left = _scalar(
        "SELECT count(*) FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id"
        " WHERE c.queue = %s",
        [QUEUE],
    )
    dead = _scalar("SELECT count(*) FROM lonnymq_dead_message WHERE queue = %s", [QUEUE])
    if left:
        problems.append(f"{left} message(s) left in queue {QUEUE!r}")
    if dead:
        problems.append(f"{dead} dead message(s) in queue {QUEUE!r}")
    issues = check()
    problems += [f"api.check(): {p.queue}/{p.channel} {p.problem} ({p.detail})" for p in issues]
    runs = sum(r for r, _ in recorded.values())
    print(
        f"jobs run: {runs:,} of {sum(expected.values()):,} (each once: {'yes' if not twice else 'NO'})   "
        f"messages left: {left}   dead: {dead}   api.check(): "
        f"{'[] (scheduler state matches the messages)' if not issues else f'{len(issues)} problem(s)'}"
    )
    return problems


def run_spark_step(
    *,
    rows: int = DEFAULT_ROWS,
    tenants: int = DEFAULT_TENANTS,
    workers: int = 2,
    concurrency: int = 4,
    batch_size: int = 100,
    timeout: float = 300,
) -> list[str]:
    """The demo's Spark step (Django must be set up); prints as it goes, returns the problems.

    Data set (Spark) -> export() into queue ``ingest`` -> the same export again (must
    enqueue nothing) -> burst workers drain it -> order of finishing -> checks.
    """
    from example_project.demo import report_workers
    from example_project.tenants.models import JobRun

    table = JobRun._meta.db_table
    problems: list[str] = []
    step_started = time.monotonic()
    _reset(table)
    with tempfile.TemporaryDirectory(prefix="lonnymq-spark-demo-") as tmp:
        spark_log = Path(tmp) / "spark.log"
        started = time.monotonic()
        try:
            spark = demo_spark_session(spark_log)
        except Exception:
            _print_log_tail(spark_log)
            raise
        try:
            print(
                f"Spark {spark.version} ({spark.sparkContext.master}) started in "
                f"{time.monotonic() - started:.1f}s; its own log is kept out of this output"
            )
            path = str(Path(tmp) / "uploads.parquet")
            started = time.monotonic()
            generate_dataset(path, rows, tenants, spark=spark)
            big = (rows + 1) // 2
            each = (rows - big) // (tenants - 1)
            spread = f"{each}" if (rows - big) % (tenants - 1) == 0 else f"{each}-{each + 1}"
            print(
                f"data set: {rows:,} uploads over {tenants:,} tenants, {BIG_TENANT} holding {big:,}, "
                f"the other {tenants - 1:,} {spread} each "
                f"(Parquet, 2 partitions, written in {time.monotonic() - started:.1f}s)"
            )
            df = spark.read.parquet(path)
            print(
                f"export(df, queue={QUEUE!r}, channel_col='tenant'): payload = the other columns as JSON, "
                "dedup key derived from each row"
            )
            first, _ = _export(df, "  first run", ", Spark starting its Python workers included")
            again, _ = _export(df, "  run again")
        except Exception:
            _print_log_tail(spark_log)
            raise
        finally:
            with _output_to(spark_log):
                spark.stop()  # free the two cores for the workers

        if (first.rows_seen, first.enqueued) != (rows, rows):
            problems.append(f"the export enqueued {first.enqueued:,} of {rows:,} rows ({first})")
        if (again.rows_seen, again.enqueued, again.duplicates) != (rows, 0, rows):
            problems.append(f"the second export was not a no-op: {again}")
        expected = _queued_per_tenant()
        queued = sum(expected.values())
        if queued != rows:
            problems.append(f"{queued:,} messages in queue {QUEUE!r} after two exports of {rows:,} rows")

        print(
            f"\nstarting {workers} worker(s): run_queue_worker --queue {QUEUE} --concurrency {concurrency} "
            f"--batch-size {batch_size} --burst (handler 'ingest' records each job)\n"
        )
        procs = _start_workers(workers, concurrency, batch_size, Path(tmp))
        in_time, seconds = _drain(procs, expected, table, timeout)
        if not in_time:
            problems.append(f"the ingest workers did not finish within {timeout:.0f}s (stopped them)")
        print()
        problems += report_workers(procs, label="ingest worker")

    problems += _fairness(expected, table)
    problems += _checks(expected, table)
    print(f"Spark step: {time.monotonic() - step_started:.1f}s in all")
    return problems


def _print_log_tail(log: Path, lines: int = 20) -> None:
    if log.exists():
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        if tail:
            print("last lines of Spark's log:\n    " + "\n    ".join(tail), file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the demo's skewed uploads data set (Parquet).")
    parser.add_argument("path")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=1000)
    args = parser.parse_args()
    n = generate_dataset(args.path, rows=args.rows, tenants=args.tenants)
    print(f"wrote {n:,} rows over {args.tenants:,} tenants ({BIG_TENANT} holds half) to {args.path}")


if __name__ == "__main__":
    main()
