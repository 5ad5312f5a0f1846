"""Drain rate of one busy channel against 1,000 channels, over worker configurations: ``python -m bench.grid``.

For each number of workers (1, 2, 4), ``--concurrency`` (1, 4, 16) and ``--batch-size`` (1,
10, 100), real ``run_queue_worker`` processes (no-op handler) drain ``--messages`` messages
that sit in one channel, then the same number spread over 1,000 channels (fewer for small
batches: at most 200 x the batch size, at least 2,000). Every cell is the
median of ``--runs`` runs; the ratio (one channel / 1,000 channels) is taken per run and its
median shown. The raw baseline (``DELETE ... SKIP LOCKED`` batches of 100, 4 workers) is
measured in the same run. ``--quick`` runs the rows the targets name plus the diagonal.

``--ab MIGRATION`` measures every run twice more in the same worker processes: once with
``lonnymq_dequeue_v1`` as that migration left it (``base``) and once with the live body, the
function swapped between drains (``CREATE OR REPLACE``; the workers' next call runs the new
body), so the table shows what the live dequeue bought in each cell.

The workers are started once per configuration and kept up between runs (a sentinel message
in flight keeps ``--burst`` workers from exiting), so a run times the drain, not Django's
start-up. The server here runs with autovacuum off; each run starts after a VACUUM, as
autovacuum would have done between two bursts.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

from django_lonnymq import sql

from . import core

QUEUE = "bench"
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_grid"


def dequeue_bodies(base: str) -> dict[str, str]:
    """``CREATE OR REPLACE`` of lonnymq_dequeue_v1: as migration ``base`` left it, and live."""
    live = sql.functions(sql.read(sql.SCHEMA_FILE))["lonnymq_dequeue_v1"]
    later = [m for m in sorted({f.split(".")[0] for f in sql.migration_files()}) if m > base]
    return {
        "base": sql.restore_previous(later[0], "lonnymq_dequeue_v1") if later else live,
        "live": live.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1),
    }


def install(conn, body: str) -> None:
    with conn.transaction():
        # The search_path that migrate pins into the function (SET search_path FROM CURRENT).
        conn.execute(
            "SELECT pg_catalog.set_config('search_path', "
            "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true)"
        )
        conn.execute(body)


def drain_rates(
    url: str,
    conn,
    workers: int,
    concurrency: int,
    batch: int,
    n: int,
    runs: int,
    bodies: dict[str, str] | None = None,
) -> dict[tuple[str, int], list[float]]:
    """msg/s per run for 1 and 1,000 channels (per dequeue body), with the same worker processes."""
    core.reset(conn)
    core.enqueue_many(conn, QUEUE, ["sentinel"])
    sentinel = core.dequeue(conn, QUEUE, 1)
    args = ["--burst", "--concurrency", str(concurrency), "--batch-size", str(batch)]
    procs = [core.start_worker(url, QUEUE, *args) for _ in range(workers)]
    variants = list(bodies or {"live": ""})
    rates: dict[tuple[str, int], list[float]] = {(v, c): [] for v in variants for c in (1, 1000)}
    try:
        for proc in procs:
            proc.wait_for(r"lonnymq worker .*: queues=")
        for run in range(runs):
            # Interleaved, and the order turned round every run: a busy moment slows all alike.
            order = [(v, c) for v in variants for c in (1, 1000)]
            for variant, channels in order if run % 2 == 0 else order[::-1]:
                if bodies:
                    install(conn, bodies[variant])
                conn.execute("VACUUM lonnymq_channel, lonnymq_message, lonnymq_wake")
                names = [f"tenant-{i}" for i in range(channels)]
                with conn.transaction():
                    for start in range(0, n, 10_000):
                        k = min(10_000, n - start)
                        core.enqueue_many(conn, QUEUE, [names[(start + i) % channels] for i in range(k)])
                t0 = time.perf_counter()
                while core.count_messages(conn, up_to=2) > 1:
                    time.sleep(0.005)
                rates[variant, channels].append(n / (time.perf_counter() - t0))
        core.ack(conn, sentinel)
        for proc in procs:
            proc.wait(timeout=60)
    finally:
        for proc in procs:
            if proc.popen.poll() is None:
                proc.stop()
    return rates


def raw_rate(url: str, conn, n: int, runs: int) -> float:
    core.reset(conn)
    procs = [core.start_plain_worker(url, "drain", "--batch", "100") for _ in range(4)]
    rates = []
    try:
        for proc in procs:
            proc.wait_for("ready")
        for _ in range(runs):
            conn.execute("VACUUM bench_plain")
            # One transaction and a notification, as the queue's enqueue_many does: the plain
            # workers would otherwise sleep out their 1 s poll before the clock's first row.
            with conn.transaction():
                core.fill_plain(conn, n)
                conn.execute("NOTIFY bench_plain")
            t0 = time.perf_counter()
            while core.count_plain(conn, up_to=1) > 0:
                time.sleep(0.005)
            rates.append(n / (time.perf_counter() - t0))
    finally:
        for proc in procs:
            proc.stop()
    return statistics.median(rates)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.grid", description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="the target rows and the diagonal only")
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--concurrency", type=int, nargs="*", default=[1, 4, 16])
    parser.add_argument("--batch", type=int, nargs="*", default=[1, 10, 100])
    parser.add_argument("--no-setup", action="store_true", help="reuse the database of a previous run")
    parser.add_argument(
        "--ab", metavar="MIGRATION", help="also run lonnymq_dequeue_v1 as this migration left it (base)"
    )
    args = parser.parse_args(argv)

    if not args.no_setup:
        core.recreate_database(args.database_url)
    conn = core.connect(args.database_url)
    bodies = dequeue_bodies(args.ab) if args.ab else None
    grid = list(itertools.product(args.workers, args.concurrency, args.batch))
    if args.quick:
        grid = [g for g in grid if g[2] == 100 or (g[1], g[2]) in {(1, 1), (4, 10), (16, 100)}]
    print(f"machine: {core.machine_facts()}; server: {core.server_facts(conn)}")
    raw = raw_rate(args.database_url, conn, args.messages, args.runs)
    print(f"raw DELETE ... SKIP LOCKED, batch 100, 4 workers: {raw:,.0f} msg/s (median of {args.runs})")
    if bodies:
        print(f"base: lonnymq_dequeue_v1 as of {args.ab}; live: as in schema.sql; same workers, same runs")
        print(f"{'workers':>7} {'conc':>5} {'batch':>6} {'1ch base':>9} {'1ch live':>9} {'1000 base':>10} "
              f"{'1000 live':>10} {'1/1000 base':>12} {'1/1000 live':>12} {'1ch live/base':>14} "
              f"{'1ch/raw':>8} {'1000/raw':>9}")  # fmt: skip
    else:
        print(f"{'workers':>7} {'conc':>5} {'batch':>6} {'1 channel':>11} {'1000 ch.':>10} {'1/1000':>7} "
              f"{'1ch/raw':>8} {'1000/raw':>9}")  # fmt: skip
    previous: dict[tuple[int, int], float] = {}
    for workers, concurrency, batch in grid:
        # Small batches drain slowly: fewer messages keep every cell to a few seconds.
        n = min(args.messages, max(2_000, 200 * batch))
        rates = drain_rates(args.database_url, conn, workers, concurrency, batch, n, args.runs, bodies)

        def ratio(variant: str, rates: dict[tuple[str, int], list[float]] = rates) -> float:
            pairs = zip(rates[variant, 1], rates[variant, 1000], strict=True)
            return statistics.median(a / b for a, b in pairs)

        one, many = statistics.median(rates["live", 1]), statistics.median(rates["live", 1000])
        note = ""
        before = previous.get((concurrency, batch))
        if before and one < before * 0.95:
            note = f"  (lower than with fewer workers: {before:,.0f})"
        previous[(concurrency, batch)] = one
        if bodies:
            one_base = statistics.median(rates["base", 1])
            gain = statistics.median(a / b for a, b in zip(rates["live", 1], rates["base", 1], strict=True))
            print(
                f"{workers:>7} {concurrency:>5} {batch:>6} {one_base:>9,.0f} {one:>9,.0f} "
                f"{statistics.median(rates['base', 1000]):>10,.0f} {many:>10,.0f} {ratio('base'):>12.2f} "
                f"{ratio('live'):>12.2f} {gain:>14.2f} {one / raw:>8.2f} {many / raw:>9.2f}{note}",
                flush=True,
            )
        else:
            print(
                f"{workers:>7} {concurrency:>5} {batch:>6} {one:>11,.0f} {many:>10,.0f} {ratio('live'):>7.2f} "
                f"{one / raw:>8.2f} {many / raw:>9.2f}{note}",
                flush=True,
            )


if __name__ == "__main__":
    main()
