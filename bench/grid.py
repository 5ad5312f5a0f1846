"""Drain rate of one busy channel against 1,000 channels, over worker configurations: ``python -m bench.grid``.

For each number of workers (1, 2, 4), ``--concurrency`` (1, 4, 16) and ``--batch-size`` (1,
10, 100), real ``run_queue_worker`` processes (no-op handler) drain ``--messages`` messages
that sit in one channel, then the same number spread over 1,000 channels (fewer for small
batches: at most 200 x the batch size, at least 2,000). Every cell is the
median of ``--runs`` runs; the ratio (one channel / 1,000 channels) is taken per run and its
median shown. The raw baseline (``DELETE ... SKIP LOCKED`` batches of 100) is measured in the
same run with 4 workers (the ratios) and with each worker count of the grid (the machine's own
scaling). ``--quick`` runs the rows the targets name plus the diagonal.

``--ab MIGRATION`` measures every run twice in the same worker processes: once with the
functions a drain calls (the dequeues, the ack) as that migration left them (``base``) and once with the live bodies,
swapped between drains (``CREATE OR REPLACE``; the workers' next call runs the new body).
``--base-tree REV`` does the same for the worker's own code: the base drains are served by
workers started from a checkout of REV (a git worktree in the temp folder), the live ones by
this tree's; the schema is this tree's for both. Either way the table shows what the change
bought in each cell.

The workers are started once per configuration and kept up between runs (a sentinel message
in flight keeps ``--burst`` workers from exiting), so a run times the drain, not Django's
start-up. The server here runs with autovacuum off; each run starts after a VACUUM, as
autovacuum would have done between two bursts.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from django_lonnymq import sql

from . import core

QUEUE = "bench"
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_grid"


# What a drain calls for every batch: the functions an --ab run swaps.
DRAIN_FUNCTIONS = ("lonnymq_dequeue_held_v1", "lonnymq_dequeue_v1", "lonnymq_ack_v1")


def drain_bodies(base: str) -> dict[str, str]:
    """``CREATE OR REPLACE`` of the functions a drain calls: as migration ``base`` left them
    (those it had), and live."""
    functions = sql.functions(sql.read(sql.SCHEMA_FILE))
    live = "\n".join(
        functions[name].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
        for name in DRAIN_FUNCTIONS
    )
    later = [m for m in sorted({f.split(".")[0] for f in sql.migration_files()}) if m > base]
    if not later:
        return {"base": live, "live": live}
    upto = [m for m in sorted({f.split(".")[0] for f in sql.migration_files()}) if m <= base]
    had = [n for n in DRAIN_FUNCTIONS if any(n in sql.functions(sql.migration(m)) for m in upto)]
    return {"base": sql.restore_previous(later[0], *had), "live": live}


def install(conn, body: str) -> None:
    with conn.transaction():
        # The search_path that migrate pins into the function (SET search_path FROM CURRENT).
        conn.execute(
            "SELECT pg_catalog.set_config('search_path', "
            "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true)"
        )
        conn.execute(body)


class Workers:
    """The cell's worker processes, started from one source tree and kept up between drains
    (a sentinel message in flight keeps ``--burst`` workers from exiting)."""

    def __init__(self, url: str, conn, count: int, args: list[str]) -> None:
        self.url, self.conn, self.count, self.args = url, conn, count, args
        self.root: Path | None = None
        self.procs: list[core.Proc] = []
        self.sentinel: list = []

    def serve_from(self, root: Path) -> None:
        if root == self.root:
            return
        self.stop()
        core.enqueue_many(self.conn, QUEUE, ["sentinel"])
        self.sentinel = core.dequeue(self.conn, QUEUE, 1)
        self.procs = [core.start_worker(self.url, QUEUE, *self.args, root=root) for _ in range(self.count)]
        self.root = root
        for proc in self.procs:
            proc.wait_for(r"lonnymq worker .*: queues=")

    def stop(self) -> None:
        """Let them exit (nothing in flight once the sentinel is acked)."""
        if self.sentinel:
            core.ack(self.conn, self.sentinel)
            self.sentinel = []
        try:
            for proc in self.procs:
                proc.wait(timeout=60)
        finally:
            for proc in self.procs:
                if proc.popen.poll() is None:
                    proc.stop()
        self.procs, self.root = [], None


def drain_rates(
    url: str,
    conn,
    workers: int,
    concurrency: int,
    batch: int,
    n: int,
    runs: int,
    bodies: dict[str, str] | None = None,
    roots: dict[str, Path] | None = None,
) -> dict[tuple[str, int], list[float]]:
    """msg/s per run for 1 and 1,000 channels, per variant: a dequeue body (``bodies``) or a
    source tree the workers run from (``roots``); the same worker processes while the tree
    does not change."""
    core.reset(conn)
    args = ["--burst", "--concurrency", str(concurrency), "--batch-size", str(batch)]
    variants = list(bodies or roots or {"live": ""})
    rates: dict[tuple[str, int], list[float]] = {(v, c): [] for v in variants for c in (1, 1000)}
    cell = Workers(url, conn, workers, args)
    try:
        for run in range(runs):
            # Interleaved, and the order turned round every run: a busy moment slows all alike.
            order = [(v, c) for v in variants for c in (1, 1000)]
            for variant, channels in order if run % 2 == 0 else order[::-1]:
                cell.serve_from(roots[variant] if roots else core.ROOT)
                if bodies:
                    install(conn, bodies[variant])
                conn.execute("VACUUM lonnymq_channel, lonnymq_message, lonnymq_wake")
                names = [f"tenant-{i}" for i in range(channels)]
                with conn.transaction():
                    core.fill(conn, QUEUE, n, names)
                t0 = time.perf_counter()
                while core.count_messages(conn, up_to=2) > 1:
                    time.sleep(0.005)
                rates[variant, channels].append(n / (time.perf_counter() - t0))
    finally:
        cell.stop()
    return rates


def base_tree(rev: str) -> Path:
    """A checkout of ``rev`` beside this one (a git worktree, made once), for the base workers."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=core.ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"lonnymq-bench-base-{commit}"
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), commit], cwd=core.ROOT, check=True)
    return path


def raw_rate(url: str, conn, n: int, runs: int, workers: int = 4) -> float:
    core.reset(conn)
    procs = [core.start_plain_worker(url, "drain", "--batch", "100") for _ in range(workers)]
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
        "--weight",
        type=int,
        default=1,
        help="every channel's weight (a default plan of the queue): the messages a backlogged channel "
        "releases per turn, the quantum of deficit round robin (default 1: exact round robin)",
    )
    parser.add_argument(
        "--ab",
        metavar="MIGRATION",
        help="also run the dequeue and ack functions as this migration left them (base)",
    )
    parser.add_argument(
        "--base-tree",
        metavar="REV",
        help="also run the workers from this commit's code (base; a git worktree beside this one)",
    )
    args = parser.parse_args(argv)

    if not args.no_setup:
        core.recreate_database(args.database_url)
    conn = core.connect(args.database_url)
    if args.weight != 1:
        # New channels take the plan's weight (the queue's default plan): every drain's channels.
        conn.execute("SELECT lonnymq_configure_plan_v1('bench-weight', p_weight => %s)", [args.weight])
        conn.execute("SELECT lonnymq_set_default_plan_v1(%s, 'bench-weight')", [QUEUE])
    if args.ab and args.base_tree:
        parser.error("--ab and --base-tree compare different things: give one")
    bodies = drain_bodies(args.ab) if args.ab else None
    roots = {"base": base_tree(args.base_tree), "live": core.ROOT} if args.base_tree else None
    grid = list(itertools.product(args.workers, args.concurrency, args.batch))
    if args.quick:
        grid = [g for g in grid if g[2] == 100 or (g[1], g[2]) in {(1, 1), (4, 10), (16, 100)}]
    print(f"machine: {core.machine_facts()}; server: {core.server_facts(conn)}; channel weight {args.weight}")
    # The machine's own scaling, for "adding a worker never lowers the rate": the raw loop
    # with as many workers as the grid's rows (the ratios use 4).
    raws = {
        w: raw_rate(args.database_url, conn, args.messages, args.runs, w) for w in sorted({*args.workers, 4})
    }
    raw = raws[4]
    print(
        "raw DELETE ... SKIP LOCKED, batch 100: "
        + ", ".join(f"{w} worker{'s' if w > 1 else ''} {r:,.0f} msg/s" for w, r in raws.items())
        + f" (medians of {args.runs})"
    )
    if bodies:
        print(
            f"base: the dequeue and ack functions as of {args.ab}; live: as in schema.sql; same workers, same runs"
        )
    if roots:
        print(f"base: workers run {args.base_tree}'s code ({roots['base']}); live: this tree's; same runs")
    if bodies or roots:
        print(f"{'workers':>7} {'conc':>5} {'batch':>6} {'1ch base':>9} {'1ch live':>9} {'1000 base':>10} "
              f"{'1000 live':>10} {'1/1000 base':>12} {'1/1000 live':>12} {'1ch live/base':>14} "
              f"{'1000 live/base':>15} {'1ch/raw':>8} {'1000/raw':>9}")  # fmt: skip
    else:
        print(f"{'workers':>7} {'conc':>5} {'batch':>6} {'1 channel':>11} {'1000 ch.':>10} {'1/1000':>7} "
              f"{'1ch/raw':>8} {'1000/raw':>9}")  # fmt: skip
    previous: dict[tuple[int, int], float] = {}
    for workers, concurrency, batch in grid:
        # Small batches drain slowly: fewer messages keep every cell to a few seconds.
        n = min(args.messages, max(2_000, 200 * batch))
        rates = drain_rates(args.database_url, conn, workers, concurrency, batch, n, args.runs, bodies, roots)

        def ratio(variant: str, rates: dict[tuple[str, int], list[float]] = rates) -> float:
            pairs = zip(rates[variant, 1], rates[variant, 1000], strict=True)
            return statistics.median(a / b for a, b in pairs)

        one, many = statistics.median(rates["live", 1]), statistics.median(rates["live", 1000])
        note = ""
        before = previous.get((concurrency, batch))
        if before and one < before * 0.95:
            note = f"  (lower than with fewer workers: {before:,.0f})"
        previous[(concurrency, batch)] = one
        if bodies or roots:
            one_base = statistics.median(rates["base", 1])
            gain = statistics.median(a / b for a, b in zip(rates["live", 1], rates["base", 1], strict=True))
            gain_many = statistics.median(
                a / b for a, b in zip(rates["live", 1000], rates["base", 1000], strict=True)
            )
            print(
                f"{workers:>7} {concurrency:>5} {batch:>6} {one_base:>9,.0f} {one:>9,.0f} "
                f"{statistics.median(rates['base', 1000]):>10,.0f} {many:>10,.0f} {ratio('base'):>12.2f} "
                f"{ratio('live'):>12.2f} {gain:>14.2f} {gain_many:>15.2f} {one / raw:>8.2f} {many / raw:>9.2f}{note}",
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
