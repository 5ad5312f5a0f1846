"""Drains in sequence on one database, the way a day goes: ``python -m bench.sequence``.

Every other bench resets the queue between cells; this one does not. One run is:

1. ``fresh``: on an emptied queue (TRUNCATE: no dead row versions), ``--messages`` messages
   in one channel, drained: the baseline.
2. ``many``: on an emptied queue, ``--messages`` over ``--channels`` channels, drained;
3. ``one after many``: then ``--messages`` into one new channel, drained, on the same tables;
4. ``hot after many``: then ``--messages`` again, half in one hot channel, half over the
   ``--channels`` channels, drained.

Each drain is served by ``--workers`` ``run_queue_worker --burst --concurrency 1
--batch-size 100`` processes, started (and idle, held up by a sentinel message in flight)
before the messages are enqueued, so the time is the drain's and not Django's start-up. Each
fill is one transaction of ``enqueue_many`` calls of 10,000. The server here runs with
autovacuum off: nothing vacuums between the drains but what the queue does itself.

``--ab`` runs every step twice in each run, interleaved: once with the workers' own VACUUM
turned off (``LONNYMQ_VACUUM_THRESHOLD = None``: the queue before it had one) and once as
configured; each step's ratio is then taken against the same variant's fresh drain.

Printed per drain: the rate (median of ``--runs`` runs) and its ratio to the same run's
fresh drain, the fewest messages any one worker fetched (0: a worker took no part), and the
channel table's dead and live row versions, updates and HOT updates after the drain.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from . import core
from .grid import Workers

QUEUE = "bench"
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_sequence"

STEPS = ("fresh", "many", "one after many", "hot after many")


def table_stats(conn, table: str = "lonnymq_channel") -> dict[str, int]:
    conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute(
        "SELECT n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, pg_relation_size(relid),"
        " (SELECT coalesce(sum(pg_relation_size(indexrelid)), 0) FROM pg_index WHERE indrelid = relid)"
        " FROM pg_stat_user_tables WHERE relname = %s",
        [table],
    ).fetchone()
    keys = ("live", "dead", "upd", "hot", "heap", "indexes")
    return dict(zip(keys, (int(v) for v in row), strict=True))


def drain(url: str, conn, workers: int, names: list[str], vacuum: str) -> tuple[float, list[float]]:
    """Enqueue one message per name (in order) in one transaction and time the drain; the
    messages each worker fetched. ``vacuum``: the workers' LQ_BENCH_VACUUM_THRESHOLD ("" for
    the setting's default, "off")."""
    cell = Workers(url, conn, workers, ["--burst", "--concurrency", "1", "--batch-size", "100"])
    if vacuum:
        # Workers.serve_from starts them through core.start_worker, which passes os.environ.
        os.environ["LQ_BENCH_VACUUM_THRESHOLD"] = vacuum
    try:
        cell.serve_from(core.ROOT)
    finally:
        os.environ.pop("LQ_BENCH_VACUUM_THRESHOLD", None)
    try:
        with conn.transaction():
            for start in range(0, len(names), 10_000):
                core.enqueue_many(conn, QUEUE, names[start : start + 10_000])
        t0 = time.perf_counter()
        while core.count_messages(conn, up_to=2) > 1:
            time.sleep(0.005)
        elapsed = time.perf_counter() - t0
    finally:
        procs = cell.procs
        cell.stop()
    # The sentinel is fetched by nobody (the bench leased it); one message is no share.
    return len(names) / elapsed, [core.worker_stats(p).get("fetched", 0.0) for p in procs]


def one_run(url: str, conn, n: int, channels: int, workers: int, vacuum: str) -> dict[str, dict[str, float]]:
    many = [f"tenant-{i % channels}" for i in range(n)]
    one = ["busy"] * n
    hot = [name for i in range(n // 2) for name in ("hot", f"tenant-{i % channels}")]
    out: dict[str, dict[str, float]] = {}
    for step, names in zip(STEPS, (one, many, one, hot), strict=True):
        if step in ("fresh", "many"):
            core.reset(conn)
        before = table_stats(conn)
        rate, fetched = drain(url, conn, workers, names, vacuum)
        stats = table_stats(conn)
        # Updates and HOT updates of this drain (the counters run on across a TRUNCATE).
        stats["upd"] -= before["upd"]
        stats["hot"] -= before["hot"]
        out[step] = {"rate": rate, "least": min(fetched), **stats}
        core.log(
            f"  workers' vacuum {vacuum or 'on'}, {step}: {rate:,.0f} msg/s, fetched per worker {[int(f) for f in fetched]}, channel table {stats}"
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sequence", description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--channels", type=int, default=1_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20,000 messages, 2 runs")
    parser.add_argument(
        "--ab",
        action="store_true",
        help="also run every step with the workers' own VACUUM off (the queue before it)",
    )
    parser.add_argument("--no-setup", action="store_true", help="reuse the database of a previous run")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.runs = 20_000, 2
    if not args.no_setup:
        core.recreate_database(args.database_url)
    conn = core.connect(args.database_url)
    print(f"machine: {core.machine_facts()}; server: {core.server_facts(conn)}")
    autovacuum = conn.execute("SHOW autovacuum").fetchone()[0]
    print(
        f"{args.messages:,} messages per drain, {args.channels:,} channels, {args.workers} workers "
        f"(--burst --concurrency 1 --batch-size 100), autovacuum={autovacuum}, medians of {args.runs} runs"
    )
    variants = ["off", ""] if args.ab else [""]
    runs: dict[str, list[dict[str, dict[str, float]]]] = {v: [] for v in variants}
    for run in range(args.runs):
        core.log(f"run {run + 1}/{args.runs}")
        # Interleaved, the order turned round every run: a busy moment slows both alike.
        for vacuum in variants if run % 2 == 0 else variants[::-1]:
            runs[vacuum].append(
                one_run(args.database_url, conn, args.messages, args.channels, args.workers, vacuum)
            )
    print(
        f"{'workers vacuum':<15} {'drain':<16} {'msg/s':>9} {'/fresh':>7} {'least fetched':>14} {'dead':>8} "
        f"{'live':>7} {'updates':>8} {'HOT':>8} {'heap kB':>8} {'idx kB':>8}"
    )
    for vacuum in variants:
        for step in STEPS:
            done = runs[vacuum]

            def med(key: str, step: str = step, done: list = done) -> float:
                return statistics.median(r[step][key] for r in done)

            ratio = statistics.median(r[step]["rate"] / r["fresh"]["rate"] for r in done)
            least = min(r[step]["least"] for r in done)
            print(
                f"{vacuum or 'on':<15} {step:<16} {med('rate'):>9,.0f} {ratio:>7.2f} {least:>14,.0f} "
                f"{med('dead'):>8,.0f} {med('live'):>7,.0f} {med('upd'):>8,.0f} {med('hot'):>8,.0f} "
                f"{med('heap') / 1024:>8,.0f} {med('indexes') / 1024:>8,.0f}",
                flush=True,
            )
    print("least fetched: the fewest messages one worker fetched in any run (0: a worker took no part)")


if __name__ == "__main__":
    main()
