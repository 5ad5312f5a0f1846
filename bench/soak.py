"""Soak: does dequeue get slower over a long steady run, with an old snapshot in the middle?

    python -m bench.soak                 # 10 minutes (what the issue asks for)
    python -m bench.soak --minutes 3     # shorter

A producer enqueues ``--rate`` messages/s (batches of 10 every 20 ms) over 100 channels; two
``manage.py run_queue_worker`` processes (no-op handler) drain them. A probe dequeues 10
messages every 100 ms and times that call: its median in the first and in the last minute is
the figure (target: last <= 1.5x first). In the middle, another session holds a snapshot
for 60 s (``BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM lonnymq_message LIMIT 1``),
so vacuum can remove nothing meanwhile: the hot tables bloat, and must recover afterwards.
Every 10 s it records the dead tuples of the queue tables. At the end it runs
``manage.py lonnymq_health``.

Uses the bench database (``--database-url``, default postgres://postgres@127.0.0.1:5432/lq_bench),
dropped and recreated first unless ``--no-setup``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from typing import Any

from . import core
from .core import log, median, percentile

QUEUE = "bench"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=200, help="messages enqueued per second")
    parser.add_argument("--vacuum", choices=["auto", "thread", "none"], default="auto",
                        help="thread: VACUUM the queue tables from the bench when their dead tuples pass "
                             "autovacuum's threshold (a stand-in for autovacuum); auto (default): do that only "
                             "when the server runs with autovacuum = off")
    parser.add_argument("--snapshot-seconds", type=float, default=None,
                        help="how long the old snapshot is held (default 60, or a third of a run shorter than 3 min)")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--no-setup", action="store_true")
    args = parser.parse_args()

    url = core.database_url(args.database_url)
    if not args.no_setup:
        log(f"setting up {url} ...")
        core.recreate_database(url)
    duration = args.minutes * 60
    hold = args.snapshot_seconds if args.snapshot_seconds is not None else (60.0 if duration >= 180 else duration / 3)
    hold_from = duration / 2 - hold / 2
    conn = core.connect(url)
    core.reset(conn)
    channels = [f"tenant-{i}" for i in range(100)]

    workers = [core.start_worker(url, QUEUE, "--concurrency", "20", "--batch-size", "50") for _ in range(2)]
    for proc in workers:
        proc.wait_for(r"lonnymq worker .*: queues=")

    stop = threading.Event()
    started = time.monotonic()
    probes: list[tuple[float, float]] = []  # (seconds since start, dequeue ms)
    dead: list[tuple[float, dict[str, int], int]] = []  # (t, dead tuples per table, backlog)
    enqueued = [0]
    errors: list[str] = []

    def producer() -> None:
        pconn = core.connect(url)
        per_tick = max(1, args.rate // 50)
        tick = 0
        try:
            while not stop.is_set():
                names = [channels[(tick * per_tick + i) % 100] for i in range(per_tick)]
                core.enqueue_many(pconn, QUEUE, names)
                enqueued[0] += per_tick
                tick += 1
                delay = started + tick / 50 - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"producer: {exc!r}")

    def probe() -> None:
        qconn = core.connect(url)
        try:
            while not stop.is_set():
                t = time.perf_counter()
                got = core.dequeue(qconn, QUEUE, 10)
                probes.append((time.monotonic() - started, (time.perf_counter() - t) * 1000))
                core.ack(qconn, got)
                stop.wait(0.1)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"probe: {exc!r}")

    def holder() -> None:
        stop.wait(hold_from)
        if stop.is_set():
            return
        hconn = core.connect(url, autocommit=False)
        hconn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        hconn.execute("SELECT 1 FROM lonnymq_message LIMIT 1")
        log(f"soak: snapshot held from {time.monotonic() - started:.0f}s for {hold:.0f}s")
        stop.wait(hold)
        hconn.rollback()
        hconn.close()
        log(f"soak: snapshot released at {time.monotonic() - started:.0f}s")

    vacuums: list[tuple[float, str, float]] = []  # (t, table, seconds)
    autovacuum = str(conn.execute("SHOW autovacuum").fetchone()[0])  # type: ignore[index]
    vacuum_thread = args.vacuum == "thread" or (args.vacuum == "auto" and autovacuum == "off")

    def vacuumer() -> None:
        """What autovacuum would do with the tables' settings (threshold 1000 dead tuples on
        the channel table, 500 on the wake-up marks; 50 + 2% of live ones on the message
        table), checked every 5 s."""
        vconn = core.connect(url)
        try:
            while not stop.wait(5):
                for table, live, dead_now in vconn.execute(
                    "SELECT relname, n_live_tup, n_dead_tup FROM pg_stat_user_tables"
                    " WHERE relname IN ('lonnymq_channel', 'lonnymq_message', 'lonnymq_wake')"
                ).fetchall():
                    limit = {"lonnymq_channel": 1000, "lonnymq_wake": 500}.get(table, 50 + 0.02 * live)
                    if dead_now > limit:
                        t = time.perf_counter()
                        vconn.execute(f"VACUUM {table}")
                        vacuums.append((time.monotonic() - started, table, time.perf_counter() - t))
        except Exception as exc:  # noqa: BLE001
            errors.append(f"vacuum: {exc!r}")

    jobs: list[Any] = [producer, probe, holder] + ([vacuumer] if vacuum_thread else [])
    threads = [threading.Thread(target=f, daemon=True) for f in jobs]
    for thread in threads:
        thread.start()
    sconn = core.connect(url)
    next_sample = 0.0
    try:
        while time.monotonic() - started < duration and not errors:
            now = time.monotonic() - started
            if now >= next_sample:
                rows = sconn.execute(
                    "SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE relname LIKE 'lonnymq_%'"
                ).fetchall()
                backlog = core.count_messages(sconn)
                dead.append((now, {r[0]: int(r[1]) for r in rows}, backlog))
                recent = [ms for t, ms in probes if t > now - 10]
                log(f"soak {now:5.0f}s: enqueued {enqueued[0]}, backlog {backlog}, probe p50 "
                    f"{median(recent):.2f} ms, dead tuples channel {dead[-1][1].get('lonnymq_channel', 0)} "
                    f"message {dead[-1][1].get('lonnymq_message', 0)}")
                next_sample += 10
            time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        for proc in workers:
            proc.stop()

    if errors:
        raise SystemExit("soak failed: " + "; ".join(errors))
    first = [ms for t, ms in probes if t < 60]
    last = [ms for t, ms in probes if t >= duration - 60]
    ratio = median(last) / median(first)
    health = subprocess.run(
        [sys.executable, str(core.ROOT / "manage.py"), "lonnymq_health"], cwd=core.ROOT, env=core.worker_env(url),
        capture_output=True, text=True,
    )
    stats = [core.worker_stats(p) for p in workers]

    print()
    print(f"soak: {args.minutes:g} min at {args.rate} msg/s over 100 channels, 2 workers; snapshot held "
          f"{hold:.0f}s from {hold_from:.0f}s; " + ", ".join(f"{k} {v}" for k, v in core.machine_facts().items()))
    if vacuum_thread:
        print(f"server autovacuum = {autovacuum}: the bench ran VACUUM itself at autovacuum's thresholds, "
              f"{len(vacuums)} times ({sum(v[2] for v in vacuums):.1f}s in all)")
    else:
        print(f"server autovacuum = {autovacuum}")
    print()
    print("| minute | probe dequeue p50 (ms) | p99 (ms) | dead tuples channel | dead tuples message | backlog |")
    print("| ------ | ---------------------- | -------- | ------------------- | ------------------- | ------- |")
    minutes = int(duration // 60) + (1 if duration % 60 else 0)
    for m in range(minutes):
        window = [ms for t, ms in probes if m * 60 <= t < (m + 1) * 60]
        samples = [d for d in dead if m * 60 <= d[0] < (m + 1) * 60]
        peak_channel = max((d[1].get("lonnymq_channel", 0) for d in samples), default=0)
        peak_message = max((d[1].get("lonnymq_message", 0) for d in samples), default=0)
        backlog = max((d[2] for d in samples), default=0)
        print(f"| {m + 1:6d} | {median(window):22.2f} | {percentile(window, 99):8.2f} | {peak_channel:19d} | "
              f"{peak_message:19d} | {backlog:7d} |")
    print()
    print(f"dequeue p50: first minute {median(first):.2f} ms, last minute {median(last):.2f} ms, "
          f"ratio {ratio:.2f}x (target <= 1.5x): {'OK' if ratio <= 1.5 else 'OVER'}")
    print(f"enqueued {enqueued[0]}, acked by workers {sum(s.get('acked', 0) for s in stats):.0f}, "
          f"workers' empty answers {sum(s.get('empty_fetches', 0) for s in stats):.0f}")
    print(f"lonnymq_health (exit {health.returncode}):")
    print(health.stdout.strip() or health.stderr.strip())


if __name__ == "__main__":
    main()
