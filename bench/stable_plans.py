"""Plans made on a small table: ``python -m bench.stable_plans``.

A worker's statements run on generic plans that last its session, until the table's next
VACUUM or ANALYZE. This bench makes those plans while the tables are small, as a worker does
when it starts on a drained queue, then times the same calls on a big backlog, at the SQL of
``--base`` (default: the migration before 0038) and at the live SQL, in rounds that alternate
between the two databases (``--database-url`` with ``_base`` / ``_live`` appended):

* **dequeue 50**: the message table emptied and vacuumed, one message enqueued, one session
  dequeues it (its plans are made), then ``--messages`` are enqueued in one channel; the
  time of that session's dequeue of 50 (rolled back, 7 times, median) against a new
  session's, which plans on the big table;
* **a held message's calls** (0039): the same one-row start, the session also runs each of
  the heartbeat (extend 50 leases), a retry (fail one), a snooze (one) and a release (give
  back 50) on it, then the same backlog comes and each is timed on a dequeued batch (rolled
  back, 7 times, median);
* **fan-out root ack**: a 1 -> ``--width`` -> 1 workflow run through, the tables vacuumed
  (as an autovacuum would), the workflow deleted; then a session that has acked the steps of
  a few small workflows (so its acks run on generic plans, as a worker's do) starts another
  and times the ack of its root, which releases the ``--width`` children, on plans made from
  the statistics that VACUUM left (one workflow).

Medians of ``--rounds``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

from django_lonnymq import sql

from . import core
from .sql_ab import build, migrations, with_suffix
from .workflows import fan_steps, start_params

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_plans"
BASE = "0037_workflow_lean"
QUEUE = "plans"


def dequeue(conn: psycopg.Connection[Any], batch: int) -> list[tuple[Any, ...]]:
    return conn.execute(
        sql.query("dequeue"),
        {"queue": QUEUE, "batch_size": batch, "lease_ms": 60_000, "worker": "b", "tolerance_ms": 0},
    ).fetchall()


def enqueue(conn: psycopg.Connection[Any], n: int) -> None:
    conn.execute(
        "SELECT lonnymq_enqueue_many_v2(%s, array_fill('c'::text, ARRAY[%s]), array_fill('{}'::jsonb, ARRAY[%s]),"
        " NULL, NULL, NULL, NULL, NULL, NULL, 5, 1000, 0)",
        [QUEUE, n, n],
    )


def dequeue_ms(conn: psycopg.Connection[Any]) -> float:
    """A dequeue of 50, rolled back each time (the same backlog for every try): median ms."""
    times = []
    for _ in range(7):
        conn.execute("BEGIN")
        start = time.perf_counter()
        assert len(dequeue(conn, 50)) == 50
        times.append((time.perf_counter() - start) * 1000)
        conn.execute("ROLLBACK")
    return statistics.median(times)


def dequeue_round(url: str, messages: int) -> tuple[float, float]:
    """(the session that planned on one row, a new session): ms per dequeue of 50."""
    with core.connect(url) as admin:
        admin.execute(
            "TRUNCATE lonnymq_message, lonnymq_dead_message, lonnymq_channel, lonnymq_wake, lonnymq_dedup"
        )
        admin.execute("VACUUM lonnymq_message, lonnymq_channel")
        early = core.connect(url)
        try:
            enqueue(admin, 1)
            early.execute("BEGIN")
            assert len(dequeue(early, 50)) == 1
            early.execute("ROLLBACK")
            enqueue(admin, messages)
            with core.connect(url) as late:
                return dequeue_ms(early), dequeue_ms(late)
        finally:
            early.close()


RETRY = {"error": "e", "backoff_base_ms": 1000, "backoff_max_ms": 60_000, "tolerance_ms": 0}
# A worker's calls on the messages it holds, each on a freshly dequeued batch (rows as the
# dequeue statement returns them). tests/worker/test_stable_plans.py checks their plans.
HELD_CALLS: dict[str, Any] = {
    "heartbeat of 50": lambda conn, rows: conn.execute(
        sql.query("extend"), {"ids": [r[0] for r in rows], "tokens": [r[8] for r in rows], "lease_ms": 60_000}
    ),
    "retry of 1": lambda conn, rows: conn.execute(
        sql.query("fail"),
        {"id": rows[0][0], "token": rows[0][8], "retry_delay_ms": 10, "reason": "failed", **RETRY},
    ),
    "discard of 1": lambda conn, rows: conn.execute(
        sql.query("fail"),
        {"id": rows[0][0], "token": rows[0][8], "retry_delay_ms": None, "reason": "discarded", **RETRY},
    ),
    "snooze of 1": lambda conn, rows: conn.execute(
        sql.query("snooze"),
        {"id": rows[0][0], "token": rows[0][8], "delay_ms": 10, "max_snoozes": 5, **RETRY},
    ),
    "release of 50": lambda conn, rows: conn.execute(
        sql.query("release"), {"ids": [r[0] for r in rows], "tokens": [r[8] for r in rows], "tolerance_ms": 0}
    ),
}


def held_call_ms(conn: psycopg.Connection[Any], call: Any) -> float:
    """One call on a freshly dequeued batch of 50, rolled back each time: median ms of 7."""
    times = []
    for _ in range(7):
        conn.execute("BEGIN")
        rows = dequeue(conn, 50)
        start = time.perf_counter()
        call(conn, rows)
        times.append((time.perf_counter() - start) * 1000)
        conn.execute("ROLLBACK")
    return statistics.median(times)


def held_round(url: str, messages: int) -> dict[str, float]:
    """ms of each held-message call, in a session that planned them on a one-row table."""
    with core.connect(url) as admin:
        admin.execute(
            "TRUNCATE lonnymq_message, lonnymq_dead_message, lonnymq_channel, lonnymq_wake, lonnymq_dedup"
        )
        admin.execute("VACUUM lonnymq_message, lonnymq_channel, lonnymq_dead_message")
        with core.connect(url) as early:
            enqueue(admin, 1)
            for call in HELD_CALLS.values():
                for _ in range(7):  # past the five custom plans
                    early.execute("BEGIN")
                    call(early, dequeue(early, 50))
                    early.execute("ROLLBACK")
            enqueue(admin, messages)
            return {name: held_call_ms(early, call) for name, call in HELD_CALLS.items()}


def ack(conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]]) -> None:
    conn.execute(
        sql.query("workflow_ack"),
        {"ids": [r[0] for r in rows], "tokens": [r[8] for r in rows], "outputs": [None] * len(rows),
         "tolerance_ms": 0},
    )  # fmt: skip


def fan_round(url: str, width: int) -> float:
    """ms of the root's ack of a 1 -> width -> 1 workflow, planned on the statistics a VACUUM
    left when the tables held one finished workflow of that size (a worker's first ack after
    an autovacuum)."""
    start_sql = sql.binary_arrays(sql.query("workflow_start"))
    with core.connect(url) as conn:
        conn.execute("DELETE FROM lonnymq_workflow")
        conn.execute(
            "TRUNCATE lonnymq_message, lonnymq_dead_message, lonnymq_channel, lonnymq_wake, lonnymq_dedup"
        )
        conn.execute(start_sql, start_params(QUEUE, fan_steps(width)))
        while rows := dequeue(conn, 1000):
            ack(conn, rows)
        conn.execute("VACUUM lonnymq_message, lonnymq_channel, lonnymq_workflow, lonnymq_workflow_step")
        conn.execute("DELETE FROM lonnymq_workflow")
    with core.connect(url) as conn:
        # A worker's session: many acks before this one, so PostgreSQL has moved the ack's
        # statements to their generic plans (after five custom ones).
        for _ in range(4):
            conn.execute(start_sql, start_params(QUEUE, fan_steps(2)))
            while rows := dequeue(conn, 1):
                ack(conn, rows)
        conn.execute("DELETE FROM lonnymq_workflow")
        conn.execute(start_sql, start_params(QUEUE, fan_steps(width)))
        [root] = dequeue(conn, 1000)
        start = time.perf_counter()
        ack(conn, [root])
        return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.stable_plans", description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--base", default=BASE, choices=migrations()[:-1])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--width", type=int, action="append", help="fan-out widths (default 1000 and 4000)")
    args = parser.parse_args()
    widths = args.width or [1000, 4000]
    urls = {"base": with_suffix(args.database_url, "base"), "live": with_suffix(args.database_url, "live")}
    build(urls["base"], args.base)
    build(urls["live"], migrations()[-1])
    print(" ".join(f"{k}={v}" for k, v in core.machine_facts().items()))
    results: dict[tuple[str, str], list[float]] = {}
    for n in range(args.rounds):
        for side, url in urls.items():
            early, late = dequeue_round(url, args.messages)
            results.setdefault((side, "early"), []).append(early)
            results.setdefault((side, "late"), []).append(late)
            for name, ms in held_round(url, args.messages).items():
                results.setdefault((side, name), []).append(ms)
            for width in widths:
                results.setdefault((side, f"fan {width}"), []).append(fan_round(url, width))
        print(f"round {n + 1}/{args.rounds} done", flush=True)

    def cell(side: str, key: str) -> str:
        return f"{statistics.median(results[(side, key)]):.1f}"

    print(
        f"\nSQL at {args.base} (base) against the live SQL at {migrations()[-1]}; ms, medians of {args.rounds} rounds"
    )
    print("| call | base | live |\n| --- | ---: | ---: |")
    print(
        f"| dequeue 50 of {args.messages:,}, planned on one row | {cell('base', 'early')} | {cell('live', 'early')} |"
    )
    print(
        f"| dequeue 50 of {args.messages:,}, planned on the backlog | {cell('base', 'late')} | {cell('live', 'late')} |"
    )
    for name in HELD_CALLS:
        print(
            f"| {name} (of {args.messages:,}), planned on one row | {cell('base', name)} | {cell('live', name)} |"
        )
    for width in widths:
        print(f"| root ack releasing {width:,}, planned on one workflow's statistics | {cell('base', f'fan {width}')} | {cell('live', f'fan {width}')} |")  # fmt: skip


if __name__ == "__main__":
    main()
