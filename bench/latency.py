"""Idle latency: ``python -m bench.latency`` (about a minute; ``--base-tree PATH`` A/B).

One idle ``run_queue_worker`` (``--concurrency 4 --batch-size 100``, the ``bench_latency``
handler, which writes when it starts) and a producer that enqueues one message every
``--interval-ms`` (10) into one of 10 channels, ``--count`` (300) messages a run; a message's
latency runs from the producer's clock just before its enqueue to its handler's start (the
commit, the notification, the worker's wake-up, its dequeue and the hand-off to a thread).

``--base-tree PATH``: a checkout of another commit (a git worktree); its workers serve runs
of their own on a database of their own (``<url>_base``, migrated by that checkout),
alternated with this tree's, so both see the same moments of a shared machine. The table
gives each run's p50 and p99, their medians and the ratios (this tree / base).

The first ``--warmup`` (5) messages of a run are reported apart (the slowest of them): they
are the first the worker's connection dequeues, and PostgreSQL plans each statement of the
dequeue the first time a session runs it (15-30 ms here), so they measure a worker's start,
not its idle latency. With 300 messages a run, the p99 would otherwise be the third of them.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Json

from . import core
from .core import log, median

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_latency"
QUEUE = "bench_latency"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def python_of(root: Path) -> str:
    """The checkout's own venv when it has one (its dependencies as installed there)."""
    own = root / ".venv" / "bin" / "python"
    return str(own) if root != core.ROOT and own.exists() else sys.executable


def prepare(url: str, root: Path) -> None:
    """Recreate the database and migrate it with ``root``'s migrations."""
    core.recreate_database(url)
    if root != core.ROOT:
        # recreate_database migrated it with this tree's: start again from the base's.
        dbname = url.rsplit("/", 1)[1]
        admin = url.rsplit("/", 1)[0] + "/postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{dbname}"')
        subprocess.run(
            [python_of(root), str(root / "manage.py"), "migrate", "-v", "0", "--skip-checks"],
            cwd=root,
            env=core.worker_env(url, root),
            check=True,
        )


def one_run(url: str, root: Path, count: int, interval: float) -> list[float]:
    """Latencies (ms) of ``count`` messages enqueued ``interval`` s apart to an idle worker."""
    conn: psycopg.Connection[Any] = core.connect(url)
    conn.execute("TRUNCATE lonnymq_message, lonnymq_channel, lonnymq_wake RESTART IDENTITY CASCADE")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "latency.txt"
        path.touch()
        args = ["run_queue_worker", "--queue", QUEUE, "--concurrency", "4", "--batch-size", "100"]
        proc = core.Proc(
            [python_of(root), str(root / "manage.py"), *args],
            core.worker_env(url, root, LONNYMQ_BENCH_LATENCY_FILE=str(path)),
            cwd=root,
        )
        try:
            proc.wait_for(r"lonnymq worker .*: queues=")
            time.sleep(1.0)
            rng = random.Random(7)
            next_at = time.perf_counter()
            for i in range(count):
                conn.execute(
                    "SELECT lonnymq_enqueue_v1(%s, %s, %s::jsonb)",
                    [QUEUE, f"tenant-{i % 10}", Json({"t": time.time()})],
                    prepare=True,
                )
                # Evenly spaced, jittered a little so no two runs beat in step with a timer.
                next_at += interval * rng.uniform(0.8, 1.2)
                time.sleep(max(next_at - time.perf_counter(), 0.0))
            deadline = time.monotonic() + 30
            while len(path.read_text().splitlines()) < count and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            proc.stop()
            conn.close()
        by_id = sorted(
            (int(line.split()[0]), float(line.split()[1]) * 1000) for line in path.read_text().splitlines()
        )
        return [ms for _, ms in by_id]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("LONNYMQ_BENCH_LATENCY_URL", DEFAULT_URL))
    parser.add_argument("--base-tree", type=Path, default=None, help="a checkout to alternate with")
    parser.add_argument("--runs", type=int, default=3, help="runs of each tree (3)")
    parser.add_argument("--count", type=int, default=300, help="messages a run (300)")
    parser.add_argument("--interval-ms", type=float, default=10.0, help="between two enqueues (10)")
    parser.add_argument("--warmup", type=int, default=5, help="first messages of a run reported apart (5)")
    args = parser.parse_args()

    trees: dict[str, tuple[Path, str]] = {"this tree": (core.ROOT, args.database_url)}
    if args.base_tree is not None:
        trees["base"] = (args.base_tree.resolve(), args.database_url + "_base")
    for root, url in trees.values():
        prepare(url, root)
    facts = core.machine_facts()
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in trees}
    for run in range(args.runs):
        for name, (root, url) in trees.items():
            got = one_run(url, root, args.count, args.interval_ms / 1000)
            first, rest = got[: args.warmup], got[args.warmup :]
            p50, p99, start = percentile(rest, 50), percentile(rest, 99), max(first, default=float("nan"))
            results[name].append((p50, p99, start))
            log(
                f"run {run + 1}, {name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, slowest of the first {args.warmup} "
                f"{start:.2f} ms ({len(got)}/{args.count} measured)"
            )

    print(
        f"idle latency: one message every {args.interval_ms:g} ms, {args.count} a run, "
        f"{args.runs} runs of each tree alternated; p50 and p99 after the first {args.warmup} of a run"
    )
    print(
        "  "
        + ", ".join(f"{k}: {v}" for k, v in {**facts, "load after": core.machine_facts().get("load")}.items())
    )
    head = f"  {'ms':<22}" + "".join(f"{'run ' + str(i + 1):>9}" for i in range(args.runs)) + f"{'median':>9}"
    print(head)
    medians: dict[str, tuple[float, float]] = {}
    for name, rows in results.items():
        for k, label in ((0, "p50"), (1, "p99"), (2, "first " + str(args.warmup))):
            values = [r[k] for r in rows]
            print(
                f"  {name + ' ' + label:<22}"
                + "".join(f"{v:9.2f}" for v in values)
                + f"{median(values):9.2f}"
            )
        medians[name] = (median([r[0] for r in rows]), median([r[1] for r in rows]))
    if "base" in medians:
        mine, base = medians["this tree"], medians["base"]
        print(f"  ratio this tree / base: p50 {mine[0] / base[0]:.2f}x, p99 {mine[1] / base[1]:.2f}x")


if __name__ == "__main__":
    main()
