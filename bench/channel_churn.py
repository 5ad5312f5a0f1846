"""Channels that come and go: ``python -m bench.channel_churn``.

A producer enqueues to ``--keys`` distinct keys (every message its own channel, as a topic
whose key is an order or an upload id makes them), ``--chunk`` keys per ``enqueue_many``
call, while ``--workers`` ``run_queue_worker`` processes drain the queue; the producer keeps
the backlog under ``--backlog`` messages, so the run is "over time", not one bulk load. The
same run goes twice on a fresh database each: pruning off (``LONNYMQ_CHANNEL_IDLE_PRUNE =
None``, the behaviour before pruning existed) and on (idle ``--idle`` seconds, so the run
sees many prune periods; the default period is a day). Ten times per run, and once drained,
it samples the channel table: live rows, its size with indexes (``pg_total_relation_size``)
and its dead row versions. The table prints both runs side by side, and the channels the
workers pruned (their ``pruned=`` counters).

A deleted row's space is reused once a vacuum has passed: the channel table asks autovacuum
for one every 1,000 dead rows (its storage settings, schema.sql), and autovacuum wakes once
a minute by default. A server with autovacuum off (the test server here) would let the
file grow whatever pruning does, so the producer runs ``VACUUM lonnymq_channel`` every
``--vacuum-every`` seconds in both runs, standing in for it (0: never).

An ``enqueue_many`` of n distinct keys holds n advisory locks until it commits, from the
server's shared lock table (``max_locks_per_transaction`` x connections, 6,400 slots on a
default server, shared with every other session): keep ``--chunk`` well below it.

The databases are ``--database-url`` with ``_off`` and ``_on`` appended to its name
(default postgres://postgres@127.0.0.1:5432/lq_bench_churn); both are dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import psycopg

from . import core

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_churn"
QUEUE = "bench"
SAMPLES = 10


def sample(conn: psycopg.Connection[Any], sent: int, started: float) -> dict[str, float]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM lonnymq_channel), pg_total_relation_size('lonnymq_channel'),"
        " (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'lonnymq_channel'),"
        " (SELECT count(*) FROM lonnymq_message)"
    ).fetchone()
    assert row is not None
    return {
        "sent": sent,
        "seconds": time.monotonic() - started,
        "channels": row[0],
        "bytes": row[1],
        "dead": row[2] or 0,
        "backlog": row[3],
    }


def run(url: str, args: argparse.Namespace, prune: str) -> tuple[list[dict[str, float]], int, float]:
    """One run: the samples, the channels the workers pruned, and its length in seconds."""
    core.recreate_database(url)
    conn = core.connect(url)
    workers = [
        core.start_worker(
            url, QUEUE, "--concurrency", "1", "--batch-size", "100", LQ_BENCH_CHANNEL_IDLE_PRUNE=prune
        )
        for _ in range(args.workers)
    ]
    for proc in workers:
        proc.wait_for(r"lonnymq worker .*: queues=")
    samples: list[dict[str, float]] = []
    started = time.monotonic()
    sent, every = 0, max(args.keys // SAMPLES, 1)
    vacuumed = time.monotonic()

    def vacuum_when_due() -> None:
        nonlocal vacuumed
        if args.vacuum_every and time.monotonic() - vacuumed >= args.vacuum_every:
            conn.execute("VACUUM lonnymq_channel")
            vacuumed = time.monotonic()

    try:
        while sent < args.keys:
            vacuum_when_due()
            while conn.execute("SELECT count(*) FROM lonnymq_message").fetchone()[0] > args.backlog:  # type: ignore[index]
                time.sleep(0.05)
            n = min(args.chunk, args.keys - sent)
            core.enqueue_many(conn, QUEUE, [f"key-{sent + i}" for i in range(n)])
            before, sent = sent, sent + n
            if before // every != sent // every:
                samples.append(sample(conn, sent, started))
                core.log(f"{prune}: {samples[-1]}")
        # Drained, then long enough for the last channels to be idle and pruned.
        while conn.execute("SELECT count(*) FROM lonnymq_message").fetchone()[0]:  # type: ignore[index]
            time.sleep(0.1)
        if prune != "off":
            time.sleep(float(prune) * 2 + 2)
        vacuum_when_due()
        samples.append(sample(conn, sent, started))
        elapsed = time.monotonic() - started
    finally:
        for proc in workers:
            proc.stop()
    pruned = sum(int(core.worker_stats(proc).get("pruned", 0)) for proc in workers)
    conn.close()
    return samples, pruned, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("LONNYMQ_BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--keys", type=int, default=200_000, help="distinct keys (channels) per run")
    parser.add_argument("--chunk", type=int, default=200, help="keys per enqueue_many call")
    parser.add_argument("--backlog", type=int, default=20_000, help="most messages waiting at once")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--idle", type=float, default=5.0, help="LONNYMQ_CHANNEL_IDLE_PRUNE of the 'on' run (s)"
    )
    parser.add_argument(
        "--vacuum-every",
        type=float,
        default=15.0,
        help="VACUUM the channel table every this many s; 0: never",
    )
    args = parser.parse_args()

    results = {}
    for prune in ("off", str(args.idle)):
        url = args.database_url + ("_off" if prune == "off" else "_on")
        results[prune] = run(url, args, prune)
    conn = core.connect(args.database_url.rsplit("/", 1)[0] + "/postgres")
    facts = {**core.machine_facts(), **core.server_facts(conn)}
    conn.close()

    off, on = results["off"], results[str(args.idle)]
    print(
        f"channel churn: {args.keys:,} distinct keys, {args.workers} workers, backlog <= {args.backlog:,}, "
        f"VACUUM lonnymq_channel every {args.vacuum_every:g} s"
    )
    print("  " + ", ".join(f"{k}: {v}" for k, v in facts.items()))
    print(
        f"  pruning off: {off[2]:.0f} s; on (idle {args.idle:g} s): {on[2]:.0f} s, {on[1]:,} channels pruned"
    )
    print()
    header = (
        f"{'keys sent':>10} | {'off: channels':>13} {'size':>9} {'dead':>8} | "
        f"{'on: channels':>12} {'size':>9} {'dead':>8} {'backlog':>8}"
    )
    print(header)
    print("-" * len(header))
    for i, (a, b) in enumerate(zip(off[0], on[0], strict=False)):
        label = f"{int(a['sent']):>10,}" if i < len(off[0]) - 1 else f"{'drained':>10}"
        print(
            f"{label} | {int(a['channels']):>13,} {a['bytes'] / 2**20:>7.1f}MB {int(a['dead']):>8,} | "
            f"{int(b['channels']):>12,} {b['bytes'] / 2**20:>7.1f}MB {int(b['dead']):>8,} {int(b['backlog']):>8,}"
        )


if __name__ == "__main__":
    main()
