"""Suspended durable messages cost other work nothing: ``python -m bench.durable``.

Two queues with the same 100 channels; one also holds ``--suspended`` (100,000) messages left
as ``lonnymq_suspend_v1`` leaves a wait without a timeout (due 9999-12-31, not leased, a
pending 'wait' checkpoint). Each round fills both queues with ``--ready`` ready messages and
times dequeue(100) + ack until they are empty, alternating which queue goes first; the table
gives the median time per dequeue+ack call of each and their ratio (docs/durable.md).

The database is ``LONNYMQ_BENCH_DATABASE_URL`` or ``--database-url`` (default
postgres://postgres@127.0.0.1:5432/lq_bench_durable); it is dropped and recreated.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg

from . import core
from .core import log, median

CHANNELS = [f"c{i}" for i in range(100)]
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_durable"


def suspend_all(conn: psycopg.Connection[Any], queue: str) -> int:
    """Every waiting message of ``queue`` becomes a suspended wait, as the worker leaves one."""
    with conn.transaction():
        conn.execute(
            "UPDATE lonnymq_message m SET dequeue_at = 253402300799999 FROM lonnymq_channel c"
            " WHERE c.id = m.channel_id AND c.queue = %s",
            [queue],
        )
        cur = conn.execute(
            "INSERT INTO lonnymq_step (message_id, name, kind, event_key, done)"
            " SELECT m.id, 'approval', 'wait', 'order-' || m.id, false FROM lonnymq_message m"
            " JOIN lonnymq_channel c ON c.id = m.channel_id WHERE c.queue = %s",
            [queue],
        )
    return cur.rowcount


def drain(conn: psycopg.Connection[Any], queue: str, total: int) -> float:
    """Seconds per dequeue(100)+ack call until ``total`` messages are acked."""
    core.fill(conn, queue, total, CHANNELS)
    calls, done, start = 0, 0, time.perf_counter()
    while done < total:
        rows = core.dequeue(conn, queue, 100)
        if not rows:
            break
        core.ack(conn, rows)
        done += len(rows)
        calls += 1
    assert done == total, (queue, done, total)
    return (time.perf_counter() - start) / max(calls, 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--suspended", type=int, default=100_000)
    parser.add_argument("--ready", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    url = args.database_url or DEFAULT_URL
    core.recreate_database(url)
    with core.connect(url) as conn:
        log(f"seeding {args.suspended:,} suspended messages ...")
        core.fill(conn, "dq_suspended", args.suspended, CHANNELS)
        assert suspend_all(conn, "dq_suspended") == args.suspended
        conn.execute("VACUUM ANALYZE lonnymq_message, lonnymq_channel, lonnymq_wake, lonnymq_step")
        drain(conn, "dq_suspended", args.ready)  # warm both
        drain(conn, "dq_none", args.ready)
        none: list[float] = []
        suspended: list[float] = []
        for run in range(args.runs):
            order = [("dq_none", none), ("dq_suspended", suspended)]
            for queue, figures in order if run % 2 == 0 else reversed(order):
                figures.append(drain(conn, queue, args.ready))
            log(f"run {run + 1}: none {none[-1] * 1e3:.3f} ms, suspended {suspended[-1] * 1e3:.3f} ms")
        left = conn.execute(
            "SELECT count(*) FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id"
            " WHERE c.queue = 'dq_suspended'"
        ).fetchone()
    base, ours = median(none), median(suspended)
    print(
        f"dequeue(100)+ack of other work, median of {args.runs} runs of {args.ready:,} messages over 100 channels"
    )
    print(f"  no suspended message:            {base * 1e3:8.3f} ms per call")
    print(
        f"  {args.suspended:,} suspended in the queue: {ours * 1e3:8.3f} ms per call   ratio {ours / base:.3f}x"
    )
    paired = median([s / n for s, n in zip(suspended, none, strict=True)])
    print(f"  median of the per-run ratios (each run alternates the order): {paired:.3f}x")
    print(f"  suspended messages left untouched: {left[0] if left else 0:,}")


if __name__ == "__main__":
    main()
