"""Where a single enqueue's time goes: ``python -m bench.enqueue_cost`` (about a minute).

One message per transaction (autocommit), the same ~100-byte JSON payload, 10 channels, on
one connection each, in rounds: every round runs each row below once on emptied tables, and
each ratio is taken against the raw INSERT of the same round (then the median of the
rounds' ratios is shown). Each row adds one layer to the one above it:

* raw INSERT: a prepared INSERT into a three-column table (bench.compare's raw-1 baseline);
* message table: a prepared INSERT straight into ``lonnymq_message`` (channel id known): the
  cost of the queue's own row, its indexes, CHECK constraints and foreign key;
* SQL function v1: ``lonnymq_enqueue_v1`` prepared, on a bare psycopg connection (the function
  before dedup modes, which the Tasks backend and schedules still call);
* SQL function: ``lonnymq_enqueue_v2`` (what ``enqueue()`` calls), the same way, no key;
* SQL fn, replace: ``lonnymq_enqueue_v2`` with one key per channel and ``on_duplicate =
  'replace'``: after the first enqueue of a channel, each one rewrites its waiting message;
* API, prepared: ``enqueue()`` through Django with ``OPTIONS["prepare_threshold"]`` set;
* API, Django defaults: ``enqueue()`` through Django as configured out of the box (client-side
  binding, nothing prepared).

``--synchronous-commit off`` leaves the commit's disk flush out (what the layers cost in CPU).
The database is ``--database-url`` (a postgres:// URL; default
postgres://postgres@127.0.0.1:5432/lq_bench_enqueue); it is dropped and recreated.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg

from . import core

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_enqueue"
QUEUE = "bench_enqueue"
CHANNELS = 10
RAW_TABLE = "CREATE TABLE bench_raw (id bigserial PRIMARY KEY, channel text NOT NULL, payload jsonb NOT NULL)"
RAW_INSERT = "INSERT INTO bench_raw (channel, payload) VALUES (%s, %s::jsonb)"
MESSAGE_INSERT = (
    "INSERT INTO lonnymq_message (channel_id, payload, dequeue_at, max_attempts)"
    " VALUES (%s, %s::jsonb, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, 5)"
)
FUNCTION_CALL_V1 = "SELECT lonnymq_enqueue_v1(%s, %s, %s::jsonb, NULL, NULL, 0, NULL, 5, 1000, 50)"
FUNCTION_CALL = "SELECT lonnymq_enqueue_v2(%s, %s, %s::jsonb, NULL, NULL, 0, NULL, 'skip', 5, 1000, 50)"
REPLACE_CALL = "SELECT lonnymq_enqueue_v2(%s, %s, %s::jsonb, NULL, NULL, 0, %s, 'replace', 5, 1000, 50)"
ROWS = [
    "raw INSERT", "message table", "SQL function v1", "SQL function", "SQL fn, replace", "API, prepared",
    "API, Django defaults",
]  # fmt: skip


def django_setup(url: str, synchronous_commit: str) -> None:
    """Two Django aliases on the bench database: Django's defaults and prepared statements."""
    import django
    import environ
    from django.conf import settings

    base = environ.Env.db_url_config(url)
    options = {"options": f"-c synchronous_commit={synchronous_commit}"}
    settings.configure(
        DATABASES={
            "default": {**base, "OPTIONS": options},
            "prepared": {**base, "OPTIONS": {**options, "prepare_threshold": 5}},
        },
        INSTALLED_APPS=["django_lonnymq"],
        USE_TZ=True,
    )
    django.setup()


def channel(i: int) -> str:
    return f"tenant-{i % CHANNELS}"


def measure(url: str, n: int, rounds: int, synchronous_commit: str) -> dict[str, dict[str, float]]:
    from django.db import connections

    from django_lonnymq import enqueue

    def connect() -> psycopg.Connection[Any]:
        return psycopg.connect(url, autocommit=True, options=f"-c synchronous_commit={synchronous_commit}")

    admin, bare = connect(), connect()
    for alias in ("default", "prepared"):
        connections[alias].ensure_connection()

    def reset() -> None:
        admin.execute(
            "TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_channel, lonnymq_wake, bench_raw"
            " RESTART IDENTITY CASCADE"
        )
        admin.execute(
            "INSERT INTO lonnymq_channel (queue, name) SELECT %s, 'tenant-' || g FROM generate_series(0, %s) g",
            (QUEUE, CHANNELS - 1),
        )
        admin.execute("VACUUM lonnymq_channel")

    ids: dict[str, int] = {}

    def raw() -> None:
        for i in range(n):
            bare.execute(RAW_INSERT, (channel(i), core.PAYLOAD_TEXT), prepare=True)

    def message_table() -> None:
        for i in range(n):
            bare.execute(MESSAGE_INSERT, (ids[channel(i)], core.PAYLOAD_TEXT), prepare=True)

    def function_v1() -> None:
        for i in range(n):
            bare.execute(FUNCTION_CALL_V1, (QUEUE, channel(i), core.PAYLOAD_TEXT), prepare=True)

    def function() -> None:
        for i in range(n):
            bare.execute(FUNCTION_CALL, (QUEUE, channel(i), core.PAYLOAD_TEXT), prepare=True)

    def replace() -> None:
        for i in range(n):
            bare.execute(REPLACE_CALL, (QUEUE, channel(i), core.PAYLOAD_TEXT, "doc"), prepare=True)

    def api(alias: str) -> Callable[[], None]:
        def run() -> None:
            for i in range(n):
                enqueue(QUEUE, core.PAYLOAD, channel=channel(i), using=alias)

        return run

    steps = dict(
        zip(ROWS, [raw, message_table, function_v1, function, replace, api("prepared"), api("default")], strict=True)
    )
    micros: dict[str, list[float]] = {row: [] for row in ROWS}
    ratios: dict[str, list[float]] = {row: [] for row in ROWS}
    for r in range(rounds):
        this: dict[str, float] = {}
        for row, step in steps.items():
            reset()
            ids.update(dict(admin.execute("SELECT name, id FROM lonnymq_channel").fetchall()))
            t0 = time.perf_counter()
            step()
            this[row] = (time.perf_counter() - t0) / n * 1e6
            micros[row].append(this[row])
        for row in ROWS:
            ratios[row].append(this["raw INSERT"] / this[row])
        core.log(f"round {r + 1}/{rounds}: " + ", ".join(f"{row} {us:.0f} us" for row, us in this.items()))
    return {
        row: {
            "us": statistics.median(micros[row]),
            "ratio": statistics.median(ratios[row]),
            "low": min(ratios[row]),
            "high": max(ratios[row]),
        }
        for row in ROWS
    }


def table(result: dict[str, dict[str, float]], n: int, rounds: int, synchronous_commit: str) -> str:
    lines = [
        f"single enqueue, {n:,} per round, {rounds} rounds, synchronous_commit={synchronous_commit}; "
        "median us per message, median of the rounds' ratios to the raw INSERT (min-max)",
        "",
        "| layer                | us/msg | msg/s  | ratio to raw INSERT |",
        "|----------------------|--------|--------|---------------------|",
    ]
    for row, r in result.items():
        ratio = f"{r['ratio']:.2f} ({r['low']:.2f}-{r['high']:.2f})"
        lines.append(f"| {row:<20} | {r['us']:6.0f} | {1e6 / r['us']:6,.0f} | {ratio:<19} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.enqueue_cost", description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--messages", type=int, default=2000, help="enqueues per row and round (default 2,000)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds (default 7)")
    ap.add_argument("--synchronous-commit", choices=["on", "off"], default="on")
    args = ap.parse_args(argv)
    url = args.database_url or DEFAULT_URL
    core.log(f"recreating {url}")
    core.recreate_database(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RAW_TABLE)
    django_setup(url, args.synchronous_commit)
    result = measure(url, args.messages, args.rounds, args.synchronous_commit)
    print(table(result, args.messages, args.rounds, args.synchronous_commit))


if __name__ == "__main__":
    main()
