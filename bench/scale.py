"""A queue at scale, next to the 1,000-channel queue in the same run: ``python -m bench.scale``.

Two sizes, each on an emptied queue of one database: the baseline (``--base-messages``
100,000 over ``--base-channels`` 1,000) and the big one (``--messages`` 10,000,000 over
``--channels`` 100,000). For each:

1. The channel rows are created (parked, no message), then ``enqueue_many`` calls of 2,000
   messages (each call takes an advisory lock per channel: 5,000-10,000 filled this shared
   server's lock table beside other sessions' locks; a call that finds it full is retried), round robin over the channels, each committed on its own, fill the queue:
   the first ``--probe`` (100,000) messages are timed (the rate into an empty queue), the
   rest untimed up to the size, then ``--probe`` more are timed (the rate into the full
   queue).
2. One message into a channel of its own (the small tenant), enqueued after the backlog.
3. Table and index sizes (``pg_total_relation_size``, the message heap, its indexes).
4. Dequeues of 100 in a row (each acked before the next), timed from the client, until the
   small tenant's message has come out (at least ``--dequeues`` of them): median and max,
   and the max of the first 10 (the bulk enqueue left a wake-up mark per channel, which
   the first dequeues apply). The small tenant's position: the messages released before it
   (one round is one message per channel: the number of channels).
5. ``--workers`` (4) ``run_queue_worker --concurrency 1 --batch-size 100`` processes,
   started while the queue is paused, drain ``--drain`` (100,000) messages of the backlog
   once it is resumed: the rate (the message table's deletes, as the statistics count them,
   over the wall time).

Each ratio is the big queue's figure over the baseline's in the same run. Targets (issue
29): enqueue >= 0.8x the empty queue's; dequeue median <= 2x the baseline's and none over
50 ms; drain >= 0.8x; the small tenant within one round. The server here runs with
autovacuum off.
"""

from __future__ import annotations

import argparse
import subprocess
import time

import psycopg

from . import core

QUEUE = "bench"
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_scale"
CHUNK = 2_000
SMALL = "small-tenant"


def enqueue_many(conn, channels: list[str]) -> None:
    for attempt in range(10):
        try:
            conn.execute(
                "SELECT lonnymq_enqueue_many_v2(%s, %s::text[], %s::jsonb[])",
                [QUEUE, channels, [core.PAYLOAD_TEXT] * len(channels)],
                prepare=True,
            )
            return
        except psycopg.errors.OutOfMemory:  # the shared lock table, full of other sessions' locks
            core.log(f"  lock table full, retry {attempt + 1}")
            time.sleep(1)
    raise RuntimeError("the server's lock table stayed full")


def wal(conn) -> int:
    return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])


def fill(conn, names: list[str], start: int, count: int, wal_per: dict | None = None) -> float:
    """``count`` messages round robin over ``names`` from position ``start``; msg/s. With
    ``wal_per``, its "wal" is set to the WAL bytes written per message meanwhile (by every
    session of the server)."""
    if count <= 0:
        return float("nan")
    t0, w0 = time.perf_counter(), wal(conn)
    for at in range(start, start + count, CHUNK):
        n = min(CHUNK, start + count - at)
        enqueue_many(conn, [names[(at + i) % len(names)] for i in range(n)])
    if wal_per is not None:
        wal_per["wal"] = (wal(conn) - w0) / count
    return count / (time.perf_counter() - t0)


def sizes(conn) -> dict[str, int]:
    conn.execute("CHECKPOINT")
    row = conn.execute(
        "SELECT pg_total_relation_size('lonnymq_message'), pg_relation_size('lonnymq_message'),"
        " pg_indexes_size('lonnymq_message'), pg_total_relation_size('lonnymq_channel'),"
        " pg_total_relation_size('lonnymq_wake'), pg_database_size(current_database())"
    ).fetchone()
    keys = ("message total", "message heap", "message indexes", "channel total", "wake total", "database")
    out = dict(zip(keys, (int(v) for v in row), strict=True))
    for name, size in conn.execute(
        "SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = 'lonnymq_message'::regclass ORDER BY c.relname"
    ).fetchall():
        out[name] = int(size)
    return out


def dequeues(conn, channels: int, least: int) -> dict[str, float]:
    """Dequeues of 100 in a row until the small tenant's message is out (and ``least``)."""
    times: list[float] = []
    before = None
    released = 0
    marked = None  # the dequeues that found wake-up marks to apply
    # Two rounds at most: past that the small tenant has waited too long anyway.
    while len(times) < least or before is None:
        t0 = time.perf_counter()
        rows = core.dequeue(conn, QUEUE, 100)
        times.append((time.perf_counter() - t0) * 1000)
        core.ack(conn, rows)
        if (
            marked is None
            and not conn.execute(
                "SELECT EXISTS (SELECT 1 FROM lonnymq_wake WHERE queue = %s)", [QUEUE]
            ).fetchone()[0]
        ):
            marked = len(times)
        for row in rows:
            if row[1] == SMALL and before is None:
                before = released
            released += 1
        if not rows or (before is None and released > 2 * channels + 1_000):
            break
    return {
        "dequeues": len(times),
        "median ms": core.median(times),
        "max ms": max(times),
        "p95 ms": core.percentile(times, 95),
        "over 50 ms": sum(t > 50 for t in times),
        "first 10 max ms": max(times[:10]),
        "after 10 median ms": core.median(times[10:]),
        "with marks": marked or 0,
        "with marks median ms": core.median(times[: marked or 0]),
        "after marks median ms": core.median(times[marked or 0 :]),
        "small after": float("nan") if before is None else before,
        "round": channels,
    }


def drain(url: str, conn, workers: int, slice_: int, root=core.ROOT) -> float:
    """``root``: the source tree the workers run (bench.drain_buffers runs another branch's)."""
    conn.execute("SELECT lonnymq_pause_queue_v1(%s, true)", [QUEUE])
    procs = [
        core.start_worker(url, QUEUE, "--concurrency", "1", "--batch-size", "100", root=root)
        for _ in range(workers)
    ]
    try:
        for proc in procs:
            proc.wait_for(r"lonnymq worker .*: queues=")

        def deleted() -> int:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            return int(
                conn.execute(
                    "SELECT n_tup_del FROM pg_stat_user_tables WHERE relname = 'lonnymq_message'"
                ).fetchone()[0]
            )

        conn.execute("SELECT pg_stat_force_next_flush()")
        time.sleep(1.1)
        start = deleted()
        conn.execute("SELECT lonnymq_pause_queue_v1(%s, false)", [QUEUE])
        t0 = time.perf_counter()
        while deleted() - start < slice_:
            time.sleep(0.05)
        elapsed = time.perf_counter() - t0
        done = deleted() - start
    finally:
        for proc in procs:
            proc.stop()
    return done / elapsed


def one_size(url: str, conn, messages: int, channels: int, args) -> dict[str, float]:
    core.reset(conn)
    conn.execute("SELECT lonnymq_pause_queue_v1(%s, false)", [QUEUE])
    names = [f"tenant-{i}" for i in range(channels)]
    conn.execute(
        "INSERT INTO lonnymq_channel (queue, name) SELECT %s, n FROM unnest(%s::text[]) AS u(n)",
        [QUEUE, names],
    )
    conn.execute("VACUUM ANALYZE lonnymq_channel")
    out: dict[str, float] = {"messages": messages, "channels": channels}
    probe = min(args.probe, messages)
    empty_wal: dict = {}
    out["enqueue empty msg/s"] = fill(conn, names, 0, probe, empty_wal)
    out["enqueue empty WAL B/msg"] = empty_wal["wal"]
    t0 = time.perf_counter()
    rest = fill(conn, names, probe, messages - probe)
    core.log(
        f"  {messages:,} over {channels:,}: filled in {time.perf_counter() - t0:,.0f} s ({rest:,.0f} msg/s)"
    )
    out["enqueue fill msg/s"] = rest
    full_wal: dict = {}
    out["enqueue full msg/s"] = fill(conn, names, messages, args.probe, full_wal)
    out["enqueue full WAL B/msg"] = full_wal["wal"]
    enqueue_many(conn, [SMALL])
    out.update(sizes(conn))
    out.update(dequeues(conn, channels, args.dequeues))
    core.log(
        f"  dequeues: {out['dequeues']:.0f}, median {out['median ms']:.1f} ms, max {out['max ms']:.1f} ms"
    )
    out["drain msg/s"] = drain(url, conn, args.workers, args.drain)
    core.log(f"  drain: {out['drain msg/s']:,.0f} msg/s")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--channels", type=int, default=100_000)
    parser.add_argument("--base-messages", type=int, default=100_000)
    parser.add_argument("--base-channels", type=int, default=1_000)
    parser.add_argument(
        "--probe", type=int, default=100_000, help="messages timed into the empty and the full queue"
    )
    parser.add_argument("--dequeues", type=int, default=100, help="dequeues of 100 timed, at least")
    parser.add_argument("--drain", type=int, default=100_000, help="messages the workers drain, timed")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--no-setup", action="store_true", help="reuse the database of a previous run")
    args = parser.parse_args(argv)
    if not args.no_setup:
        core.recreate_database(args.database_url)
    conn = core.connect(args.database_url)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=core.ROOT, capture_output=True, text=True
    ).stdout.strip()
    autovacuum = conn.execute("SHOW autovacuum").fetchone()[0]
    print(f"machine: {core.machine_facts()}; server: {core.server_facts(conn)}; autovacuum={autovacuum}")
    print(
        f"commit {commit}; {args.workers} workers (--concurrency 1 --batch-size 100), drain of {args.drain:,}"
    )
    base = one_size(args.database_url, conn, args.base_messages, args.base_channels, args)
    big = one_size(args.database_url, conn, args.messages, args.channels, args)
    print(f"load after: {core.machine_facts().get('load')}")

    def row(label: str, key: str, fmt: str, ratio: float | None = None, target: str = "") -> None:
        r = "" if ratio is None else f"{ratio:.2f}x"
        print(f"{label:<36} {format(base[key], fmt):>14} {format(big[key], fmt):>14} {r:>8}  {target}")

    heads = [f"{size['messages']:,.0f}/{size['channels']:,.0f}" for size in (base, big)]
    print(f"{'':<36} {heads[0]:>14} {heads[1]:>14}")
    print(f"{'(messages/channels)':<36} {'baseline':>14} {'big':>14} {'ratio':>8}  target")
    row("enqueue into empty queue, msg/s", "enqueue empty msg/s", ",.0f")
    row("enqueue, fill, msg/s", "enqueue fill msg/s", ",.0f")
    row(
        "enqueue into full queue, msg/s",
        "enqueue full msg/s",
        ",.0f",
        big["enqueue full msg/s"] / big["enqueue empty msg/s"],
        ">= 0.8x (big full / big empty)",
    )
    row("enqueue into empty queue, WAL B/msg", "enqueue empty WAL B/msg", ",.0f")
    row("enqueue into full queue, WAL B/msg", "enqueue full WAL B/msg", ",.0f")
    row("dequeues of 100 timed", "dequeues", ",.0f")
    row("dequeue median, ms", "median ms", ".1f", big["median ms"] / base["median ms"], "<= 2x")
    row("dequeue 95th percentile, ms", "p95 ms", ".1f")
    row("dequeue max, ms", "max ms", ".1f", None, "<= 50 ms")
    row("dequeues over 50 ms", "over 50 ms", ",.0f")
    row("dequeue max of the first 10, ms", "first 10 max ms", ".1f")
    row("dequeue median after the first 10, ms", "after 10 median ms", ".1f")
    row("dequeues that applied wake-up marks", "with marks", ",.0f")
    row("  their median, ms", "with marks median ms", ".1f")
    row("dequeue median after the marks, ms", "after marks median ms", ".1f")
    row("small tenant: released before it", "small after", ",.0f", None, "<= one round")
    row("one round (channels)", "round", ",.0f")
    row("drain, 4 workers, msg/s", "drain msg/s", ",.0f", big["drain msg/s"] / base["drain msg/s"], ">= 0.8x")
    for key in base:
        if key.startswith(
            ("message", "channel total", "wake", "database", "lonnymq_message")
        ) and key not in ("messages",):
            print(f"{key + ', MB':<36} {base[key] / 2**20:>14,.1f} {big[key] / 2**20:>14,.1f}")


if __name__ == "__main__":
    main()
