"""One publish to a topic with many consumer groups: ``python -m bench.topic_fanout``.

For each number of groups (``--groups``, default 1 10 100 300 1000) the topic gets that many
subscribed queues; one event (one key) is published in a transaction that is then rolled
back, so every run sees the same tables, 9 runs (5 above 100 groups). Prints the best and
median time of a publish, the best time per group, and the cost of each added group (best
runs, smallest to largest size). ``--warm`` creates each group's channel beforehand, as a
topic in use has them.

A publish holds one advisory lock per group (per key: per channel it writes to) until its
transaction ends, from PostgreSQL's shared lock table; a size that needs more than half of
that table is skipped (it could make other sessions' lock requests fail meanwhile).

The database is ``--database-url`` (or ``LONNYMQ_BENCH_DATABASE_URL``; default
postgres://postgres@127.0.0.1:5432/lq_bench_fanout); it is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import psycopg

from django_lonnymq import sql

from . import core

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_fanout"
PARAMS = {
    "topic": "fanout", "keys": None, "payloads": ['{"order": 1}'], "run_at_ms": None, "dedup_keys": None, "on_duplicate": None,
    "default_max_attempts": 5, "priority_step_ms": 1000, "tolerance_ms": 50,
}  # fmt: skip


def lock_table_size(conn: psycopg.Connection) -> int:
    """Slots of the server's shared lock table (PostgreSQL sizes it from these settings)."""
    row = conn.execute(
        "SELECT current_setting('max_locks_per_transaction')::int"
        " * (current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int)"
    ).fetchone()
    return int(row[0])  # type: ignore[index]


def time_publish(conn: psycopg.Connection, groups: int, warm: bool) -> list[float]:
    conn.execute(
        "TRUNCATE lonnymq_subscription, lonnymq_message, lonnymq_channel, lonnymq_dedup, lonnymq_wake CASCADE"
    )
    conn.execute(
        "INSERT INTO lonnymq_subscription (topic, queue) SELECT 'fanout', 'group_' || i FROM generate_series(1, %s) i",
        [groups],
    )
    if warm:
        conn.execute(
            "INSERT INTO lonnymq_channel (queue, name) SELECT 'group_' || i, 'default' FROM generate_series(1, %s) i",
            [groups],
        )
    conn.execute("ANALYZE")
    runs = []
    for _ in range(9 if groups <= 100 else 5):
        with conn.transaction():
            start = time.perf_counter()
            conn.execute(sql.query("publish"), PARAMS).fetchall()
            runs.append((time.perf_counter() - start) * 1000)
            raise psycopg.Rollback()
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("LONNYMQ_BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 10, 100, 300, 1000])
    parser.add_argument("--warm", action="store_true", help="create each group's channel beforehand")
    args = parser.parse_args()
    core.recreate_database(args.database_url)
    conn = core.connect(args.database_url)
    slots = lock_table_size(conn)
    facts = {**core.machine_facts(), **core.server_facts(conn), "lock table": str(slots)}
    print(", ".join(f"{k}: {v}" for k, v in facts.items()))
    print(f"{'groups':>7} {'best ms':>9} {'median ms':>10} {'best ms/group':>14}")
    best: dict[int, float] = {}
    for groups in sorted(args.groups):
        if groups > slots // 2:
            print(f"{groups:>7} skipped: needs {groups} locks of the server's {slots}")
            continue
        runs = time_publish(conn, groups, args.warm)
        best[groups] = min(runs)
        print(
            f"{groups:>7} {best[groups]:>9.1f} {statistics.median(runs):>10.1f} {best[groups] / groups:>14.3f}"
        )
    if len(best) > 1:
        low, high = min(best), max(best)
        print(
            f"each added group ({low} -> {high} groups, best runs): {(best[high] - best[low]) / (high - low):.3f} ms"
        )


if __name__ == "__main__":
    main()
