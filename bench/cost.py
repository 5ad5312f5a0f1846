"""Where a drained message's time goes: ``python -m bench.cost``.

Two measurements, each a median of ``--runs``:

1. **CPU per message**, worker and server apart. Real ``run_queue_worker`` processes
   (``--concurrency 1 --batch-size 100``, the no-op handler) drain ``--messages`` messages
   from one channel and from 1,000 channels, with 1, 2 and 4 workers; the raw loop
   (``DELETE ... SKIP LOCKED`` batches of 100) drains the same number with as many
   workers. The CPU time the worker processes and their server backends used during the
   drain (``/proc/<pid>/stat``; the server must run on this machine), divided by the
   messages. On a machine whose cores are all busy, these microseconds are the rate.
2. **SQL per call**, on one connection with no other client: a dequeue of 100 and the ack
   of those 100, one channel against 1,000 channels (each holding 100 messages), after
   ``--warm`` such calls.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import psycopg

from . import core

QUEUE = "bench"
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_cost"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes so far (those that exited count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


def backends(conn: psycopg.Connection[Any], application: str) -> list[int]:
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s", [application + "%"]
    ).fetchall()
    return [row[0] for row in rows]


def drain(fill: Any, left: Any) -> float:
    """Fill (the workers are up and waiting), then wait until ``left()`` says it is drained."""
    fill()
    t0 = time.perf_counter()
    while left():
        time.sleep(0.005)
    return time.perf_counter() - t0


def queue_cost(
    url: str, conn: psycopg.Connection[Any], workers: int, channels: int, n: int
) -> tuple[float, float, float]:
    """msg/s, worker CPU us/msg, server CPU us/msg of one drain by run_queue_worker processes."""
    core.reset(conn)
    core.enqueue_many(conn, QUEUE, ["sentinel"])
    sentinel = core.dequeue(conn, QUEUE, 1)
    args = ["--burst", "--concurrency", "1", "--batch-size", "100"]
    procs = [core.start_worker(url, QUEUE, *args) for _ in range(workers)]
    try:
        for proc in procs:
            proc.wait_for(r"lonnymq worker .*: queues=")
        conn.execute("VACUUM lonnymq_channel, lonnymq_message, lonnymq_wake")
        names = [f"tenant-{i}" for i in range(channels)]

        def fill() -> None:
            with conn.transaction():
                core.fill(conn, QUEUE, n, names)

        pids = [p.popen.pid for p in procs]
        servers = backends(conn, "lonnymq-worker")
        before = cpu_seconds(pids), cpu_seconds(servers)
        seconds = drain(fill, lambda: core.count_messages(conn, up_to=2) > 1)
        after = cpu_seconds(pids), cpu_seconds(servers)
        core.ack(conn, sentinel)
        for proc in procs:
            proc.wait(timeout=60)
    finally:
        for proc in procs:
            if proc.popen.poll() is None:
                proc.stop()
    return n / seconds, (after[0] - before[0]) / n * 1e6, (after[1] - before[1]) / n * 1e6


def raw_cost(url: str, conn: psycopg.Connection[Any], workers: int, n: int) -> tuple[float, float, float]:
    core.reset(conn)
    procs = [core.start_plain_worker(url, "drain", "--batch", "100") for _ in range(workers)]
    try:
        for proc in procs:
            proc.wait_for("ready")
        conn.execute("VACUUM bench_plain")

        def fill() -> None:
            with conn.transaction():
                core.fill_plain(conn, n)
                conn.execute("NOTIFY bench_plain")

        pids = [p.popen.pid for p in procs]
        servers = backends(conn, "lonnymq-bench-plain")
        before = cpu_seconds(pids), cpu_seconds(servers)
        seconds = drain(fill, lambda: core.count_plain(conn, up_to=1) > 0)
        after = cpu_seconds(pids), cpu_seconds(servers)
    finally:
        for proc in procs:
            proc.stop()
    return n / seconds, (after[0] - before[0]) / n * 1e6, (after[1] - before[1]) / n * 1e6


def sql_per_call(conn: psycopg.Connection[Any], channels: int, warm: int, calls: int) -> tuple[float, float]:
    """Median ms of a dequeue of 100 and of acking those 100, on this connection alone."""
    core.reset(conn)
    conn.execute("VACUUM lonnymq_channel, lonnymq_message, lonnymq_wake")
    names = [f"tenant-{i}" for i in range(channels)]
    n = 100 * max(channels, warm + calls)
    with conn.transaction():
        core.fill(conn, QUEUE, n, names)
    conn.execute("SET synchronous_commit = off")  # as the worker's connection
    dequeues, acks = [], []
    for call in range(warm + calls):
        t0 = time.perf_counter()
        rows = core.dequeue(conn, QUEUE, 100)
        t1 = time.perf_counter()
        core.ack(conn, rows)
        t2 = time.perf_counter()
        if call >= warm:
            dequeues.append(t1 - t0)
            acks.append(t2 - t1)
    conn.execute("RESET synchronous_commit")
    return statistics.median(dequeues) * 1000, statistics.median(acks) * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cost", description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--warm", type=int, default=300, help="dequeue+ack calls before the timed ones")
    parser.add_argument("--no-setup", action="store_true", help="reuse the database of a previous run")
    args = parser.parse_args(argv)

    if not args.no_setup:
        core.recreate_database(args.database_url)
    conn = core.connect(args.database_url)
    print(f"machine: {core.machine_facts()}; server: {core.server_facts(conn)}")
    print(f"\nCPU per message, {args.messages:,} messages, medians of {args.runs} "
          "(worker: the worker processes; server: their backends)")  # fmt: skip
    print(
        f"{'drained by':<24} {'workers':>7} {'msg/s':>9} {'worker us':>10} {'server us':>10} {'total us':>9}"
    )
    for workers in args.workers:
        rows: list[tuple[str, Any]] = [
            ("raw loop", lambda w=workers: raw_cost(args.database_url, conn, w, args.messages)),
            ("lonnymq, 1 channel", lambda w=workers: queue_cost(args.database_url, conn, w, 1, args.messages)),
            ("lonnymq, 1,000 channels", lambda w=workers: queue_cost(args.database_url, conn, w, 1000, args.messages)),
        ]  # fmt: skip
        for label, measure in rows:
            runs = [measure() for _ in range(args.runs)]
            rate, worker_us, server_us = (statistics.median(r[i] for r in runs) for i in range(3))
            print(
                f"{label:<24} {workers:>7} {rate:>9,.0f} {worker_us:>10.1f} {server_us:>10.1f} "
                f"{worker_us + server_us:>9.1f}",
                flush=True,
            )
    print(f"\nSQL per call, one connection, after {args.warm} calls (median ms of 200)")
    print(f"{'channels':>8} {'dequeue 100':>12} {'ack 100':>8}")
    for channels in (1, 1000):
        dequeue_ms, ack_ms = sql_per_call(conn, channels, args.warm, 200)
        print(f"{channels:>8,} {dequeue_ms:>12.2f} {ack_ms:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
