"""What periodic schedules cost a worker: ``python -m bench.periodic`` (about a minute).

Each poll a worker runs one tick check for its queues: a transaction with the named query
``claim_schedules`` (``schedules.tick`` exactly as the worker calls it). This measures that
check, in rounds, against a baseline measured in the same round (a transaction with
``SELECT 1``: what any statement the worker sends costs), with

* no schedule at all;
* 10,000 schedules of the worker's queue (one per tenant), none due;
* 10,000 schedules of another queue, none of the worker's;

and prints the plan of the check with 10,000 schedules (``EXPLAIN (ANALYZE, BUFFERS)``: one
probe of ``lonnymq_schedule_due_idx``, no table row read). Then 10,000 schedules fall due at
once and one connection fires them all (ticks per second). The database is
``--database-url`` (or ``LONNYMQ_BENCH_DATABASE_URL``); it is dropped and recreated.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

from . import core

QUEUE = "reports"
SCHEDULES = 10_000
ROWS = ["SELECT 1 (baseline)", "no schedules", "10,000 of its queue, none due", "10,000 of another queue"]


def django_setup(url: str) -> None:
    import django
    import environ
    from django.conf import settings

    settings.configure(
        DATABASES={"default": environ.Env.db_url_config(url)}, INSTALLED_APPS=["django_lonnymq"], USE_TZ=True
    )
    django.setup()


def add_schedules(conn: psycopg.Connection[Any], queue: str, n: int, due_in_ms: int) -> None:
    conn.execute(
        "INSERT INTO lonnymq_schedule (name, queue, channel, cron, timezone, payload, next_tick_at)"
        " SELECT %s || '-tenant-' || g, %s, 'tenant-' || g, '0 3 * * *', 'UTC', '{}'::jsonb,"
        "        (extract(epoch FROM clock_timestamp()) * 1000)::bigint + %s"
        "   FROM generate_series(1, %s) g",
        (queue, queue, due_in_ms, n),
    )
    conn.execute("VACUUM ANALYZE lonnymq_schedule")


def measure(url: str, calls: int, rounds: int) -> tuple[dict[str, dict[str, float]], str, dict[str, float]]:
    from django_lonnymq import schedules, sql

    admin, worker = core.connect(url), core.connect(url)

    def baseline() -> None:
        with worker.transaction():
            worker.execute("SELECT 1")

    def check() -> None:
        schedules.tick(worker, [QUEUE])

    def reset(setup: str) -> None:
        admin.execute("TRUNCATE lonnymq_schedule RESTART IDENTITY")
        if setup == "mine":
            add_schedules(admin, QUEUE, SCHEDULES, 86_400_000)
        elif setup == "other":
            add_schedules(admin, "other", SCHEDULES, 86_400_000)
        else:
            admin.execute("VACUUM ANALYZE lonnymq_schedule")

    setups = dict(
        zip(ROWS, [("none", baseline), ("none", check), ("mine", check), ("other", check)], strict=True)
    )
    micros: dict[str, list[float]] = {row: [] for row in ROWS}
    ratios: dict[str, list[float]] = {row: [] for row in ROWS}
    for r in range(rounds):
        this: dict[str, float] = {}
        for row, (setup, step) in setups.items():
            reset(setup)
            for _ in range(50):  # warm the plan and the cache
                step()
            t0 = time.perf_counter()
            for _ in range(calls):
                step()
            this[row] = (time.perf_counter() - t0) / calls * 1e6
            micros[row].append(this[row])
        for row in ROWS:
            ratios[row].append(this[row] / this[ROWS[0]])
        core.log(f"round {r + 1}/{rounds}: " + ", ".join(f"{row} {us:.0f} us" for row, us in this.items()))

    reset("mine")
    plan_rows = admin.execute(
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) " + sql.query("claim_schedules"),
        {"queues": [QUEUE], "now_ms": None, "limit": schedules.CLAIM_BATCH},
    ).fetchall()
    plan = "\n".join(row[0] for row in plan_rows)

    # All due at once: how fast one connection fires them (what a worker does after a deploy
    # at 03:00, with every tenant's nightly report due).
    admin.execute(
        "TRUNCATE lonnymq_schedule, lonnymq_message, lonnymq_dedup, lonnymq_channel RESTART IDENTITY CASCADE"
    )
    admin.execute(
        "INSERT INTO lonnymq_schedule (name, queue, channel, every_ms, payload, next_tick_at)"
        " SELECT 'hourly-tenant-' || g, %s, 'tenant-' || g, 3600000, '{}'::jsonb,"
        "        (extract(epoch FROM clock_timestamp()) * 1000)::bigint / 3600000 * 3600000"
        "   FROM generate_series(1, %s) g",
        (QUEUE, SCHEDULES),
    )
    admin.execute("VACUUM ANALYZE lonnymq_schedule")
    t0 = time.perf_counter()
    fired = 0
    while claimed := schedules.tick(worker, [QUEUE]):
        fired += claimed
    took = time.perf_counter() - t0
    messages = admin.execute("SELECT count(*) FROM lonnymq_message").fetchone()[0]
    firing = {"schedules": fired, "messages": messages, "seconds": took, "per_second": fired / took}
    summary = {
        row: {
            "us": statistics.median(micros[row]),
            "ratio": statistics.median(ratios[row]),
            "low": min(ratios[row]),
            "high": max(ratios[row]),
        }
        for row in ROWS
    }
    return summary, plan, firing


def table(
    result: dict[str, dict[str, float]], plan: str, firing: dict[str, float], calls: int, rounds: int
) -> str:
    lines = [
        f"Periodic schedules: one worker's tick check, {calls:,} checks per row, median of {rounds} rounds",
        "",
        "| check | us per check | x baseline (min-max) |",
        "| --- | ---: | ---: |",
    ]
    for row, cell in result.items():
        lines.append(
            f"| {row} | {cell['us']:.0f} | {cell['ratio']:.2f} ({cell['low']:.2f}-{cell['high']:.2f}) |"
        )
    lines += [
        "",
        f"Plan of the check, {SCHEDULES:,} schedules of the queue, none due:",
        "",
        *("    " + line for line in plan.splitlines()),
        "",
        f"All {firing['schedules']:,.0f} due at once, one connection: {firing['messages']:,.0f} messages in "
        f"{firing['seconds']:.1f} s ({firing['per_second']:,.0f} schedules fired per second)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.periodic", description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--calls", type=int, default=2000, help="tick checks per row and round (default 2,000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    args = ap.parse_args(argv)
    url = core.database_url(args.database_url)
    core.log(f"recreating {url}")
    core.recreate_database(url)
    django_setup(url)
    result, plan, firing = measure(url, args.calls, args.rounds)
    print(table(result, plan, firing, args.calls, args.rounds))


if __name__ == "__main__":
    main()
