"""Soak: does dequeue get slower over a long steady run, with an old snapshot in the middle?

    python -m bench.soak                 # 10 minutes (what the issue asks for)
    python -m bench.soak --minutes 3     # shorter
    python -m bench.soak --cluster --minutes 30 --channels 200 --rate 300 --snapshot-seconds 0
                                         # steady state on the bench's own server, autovacuum on

A producer enqueues ``--rate`` messages/s (batches of 10 every 20 ms) over 100 channels; two
``manage.py run_queue_worker`` processes (no-op handler) drain them. A probe dequeues 10
messages every 100 ms and times that call: its median in the first and in the last minute is
the figure (target: last <= 1.5x first). In the middle, another session holds a snapshot
for 60 s (``BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM lonnymq_message LIMIT 1``),
so vacuum can remove nothing meanwhile: the hot tables bloat, and must recover afterwards.
Every 10 s it records the dead tuples of the queue tables. At the end it runs
``manage.py lonnymq_health``.

Every 10 s it also records the size of each queue table and index, the tables' dead and live
tuples, autovacuum's and manual VACUUMs' counts (``pg_stat_user_tables``; with autovacuum on,
the manual ones are the workers' own housekeeping, ``LONNYMQ_VACUUM_THRESHOLD``), the backlog
and the probe's p50/p99 over those 10 s. It prints the medians of the first and the last
``--window-minutes`` (5) side by side and a verdict: flat, or what grew and by how much.

Uses the bench database (``--database-url``, default postgres://postgres@127.0.0.1:5432/lq_bench),
dropped and recreated first unless ``--no-setup``. ``--cluster``: instead, a throwaway cluster
of its own started from the local PostgreSQL binaries (initdb/pg_ctl, the tests' code in
tests/dbserver.py) with autovacuum on and a production server's settings (``CLUSTER_SETTINGS``:
PostgreSQL's defaults for autovacuum, a naptime of one minute), stopped and removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from . import core
from .core import log, median, percentile

QUEUE = "bench"

# The --cluster server: autovacuum as PostgreSQL ships it (on; a naptime of one minute, 3
# workers, a threshold of 50 + 20% of the live rows, a cost delay of 2 ms; the queue tables
# set their own thresholds, see schema.sql), durable commits, and every autovacuum logged so
# the bench can count and show them.
CLUSTER_SETTINGS = {
    "autovacuum": "on",
    "autovacuum_naptime": "60s",
    "autovacuum_max_workers": "3",
    "autovacuum_vacuum_threshold": "50",
    "autovacuum_vacuum_scale_factor": "0.2",
    "autovacuum_vacuum_cost_delay": "2ms",
    "track_counts": "on",
    "shared_buffers": "256MB",
    "fsync": "on",
    "synchronous_commit": "on",
    "log_autovacuum_min_duration": "0",
}
TABLE_STATS = (
    "SELECT relname::text, n_live_tup, n_dead_tup, pg_relation_size(relid), autovacuum_count, vacuum_count"
    " FROM pg_stat_user_tables WHERE relname LIKE 'lonnymq\\_%'"
)
INDEX_STATS = (
    "SELECT indexrelname::text, pg_relation_size(indexrelid) FROM pg_stat_user_indexes"
    " WHERE relname LIKE 'lonnymq\\_%'"
)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=200, help="messages enqueued per second")
    parser.add_argument("--channels", type=int, default=100, help="channels the producer enqueues into, round robin")
    parser.add_argument("--window-minutes", type=float, default=5.0,
                        help="the first and last windows compared (at most a third of the run each)")
    parser.add_argument("--vacuum", choices=["auto", "thread", "none"], default="auto",
                        help="thread: VACUUM the queue tables from the bench when their dead tuples pass "
                             "autovacuum's threshold (a stand-in for autovacuum); auto (default): do that only "
                             "when the server runs with autovacuum = off")
    parser.add_argument("--snapshot-seconds", type=float, default=None,
                        help="how long the old snapshot is held (default 60, or a third of a run shorter than "
                             "3 min; 0: none, a steady state)")
    parser.add_argument("--cluster", action="store_true",
                        help="run on a throwaway cluster of the bench's own (local initdb/pg_ctl), autovacuum on "
                             "with PostgreSQL's default settings; stopped and removed at the end")
    parser.add_argument("--samples-out", default=None, help="write the 10 s samples to this JSON file")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--no-setup", action="store_true")
    args = parser.parse_args()
    if args.channels < 1 or args.rate < 1 or args.minutes <= 0:
        parser.error("--channels, --rate and --minutes must be positive")

    # A SIGTERM (a killed nohup run) unwinds like Ctrl-C, so the cluster is stopped and removed.
    signal.signal(signal.SIGTERM, _interrupt)
    cluster = None
    if args.cluster:
        sys.path.insert(0, str(core.ROOT))
        from tests import dbserver

        log("soak: starting a throwaway cluster (autovacuum on) ...")
        cluster = dbserver.start_cluster(CLUSTER_SETTINGS)
        if cluster is None:
            raise SystemExit("soak --cluster: no PostgreSQL server binaries (initdb, pg_ctl) found")
        log(f"soak: cluster in {cluster.datadir}, port {cluster.port}")
    try:
        url = cluster.url("lq_bench") if cluster else core.database_url(args.database_url)
        run(args, url, cluster)
    finally:
        if cluster is not None:
            cluster.stop()
            log(f"soak: cluster stopped and removed ({cluster.datadir})")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace, url: str, cluster: Any) -> None:
    if not args.no_setup or cluster is not None:
        log(f"setting up {url} ...")
        core.recreate_database(url)
    duration = args.minutes * 60
    hold = args.snapshot_seconds if args.snapshot_seconds is not None else (60.0 if duration >= 180 else duration / 3)
    hold_from = duration / 2 - hold / 2
    conn = core.connect(url)
    core.reset(conn)
    n_channels = args.channels
    channels = [f"tenant-{i}" for i in range(n_channels)]

    workers = [core.start_worker(url, QUEUE, "--concurrency", "20", "--batch-size", "50") for _ in range(2)]
    for proc in workers:
        proc.wait_for(r"lonnymq worker .*: queues=")

    stop = threading.Event()
    started = time.monotonic()
    probes: list[tuple[float, float]] = []  # (seconds since start, dequeue ms)
    dead: list[tuple[float, dict[str, int], int]] = []  # (t, dead tuples per table, backlog)
    samples: list[dict[str, Any]] = []  # every 10 s: see sample()
    enqueued = [0]
    errors: list[str] = []

    def producer() -> None:
        pconn = core.connect(url)
        per_tick = max(1, args.rate // 50)
        tick = 0
        try:
            while not stop.is_set():
                names = [channels[(tick * per_tick + i) % n_channels] for i in range(per_tick)]
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
        if hold <= 0:
            return
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
    naptime = str(conn.execute("SHOW autovacuum_naptime").fetchone()[0])  # type: ignore[index]
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
                samples.append(sample(sconn, now, enqueued[0], [ms for t, ms in probes if t > now - 10]))
                last = samples[-1]
                tables = last["tables"]
                dead.append((now, {k: v["dead"] for k, v in tables.items()}, last["backlog"]))
                log(f"soak {now:5.0f}s: enqueued {enqueued[0]}, backlog {last['backlog']}, probe p50 "
                    f"{last['p50']:.2f} ms, dead tuples channel {dead[-1][1].get('lonnymq_channel', 0)} "
                    f"message {dead[-1][1].get('lonnymq_message', 0)}, autovacuums "
                    f"{sum(v['autovacuum'] for v in tables.values())}, other VACUUMs "
                    f"{sum(v['vacuum'] for v in tables.values())}, load {last['load']:.2f}")
                next_sample += 10
            time.sleep(0.5)
        if not errors:  # one sample at the very end, so the last window is complete
            now = time.monotonic() - started
            samples.append(sample(sconn, now, enqueued[0], [ms for t, ms in probes if t > now - 10]))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        for proc in workers:
            proc.stop()

    if errors:
        raise SystemExit("soak failed: " + "; ".join(errors))
    first = [ms for t, ms in probes if t < 60]
    last_minute = [ms for t, ms in probes if t >= duration - 60]
    ratio = median(last_minute) / median(first)
    health = subprocess.run(
        [sys.executable, str(core.ROOT / "manage.py"), "lonnymq_health"], cwd=core.ROOT, env=core.worker_env(url),
        capture_output=True, text=True,
    )
    stats = [core.worker_stats(p) for p in workers]
    autovacuum_log = autovacuum_lines(cluster.log) if cluster is not None else []
    if args.samples_out:
        with open(args.samples_out, "w") as out:
            json.dump({"args": vars(args), "samples": samples, "autovacuum_log": autovacuum_log}, out, indent=1)

    print()
    snapshot = f"snapshot held {hold:.0f}s from {hold_from:.0f}s" if hold > 0 else "no snapshot held"
    print(f"soak: {args.minutes:g} min at {args.rate} msg/s over {n_channels} channels, 2 workers; {snapshot}; "
          + ", ".join(f"{k} {v}" for k, v in core.machine_facts().items()))
    if cluster is not None:
        print(f"server: the bench's own throwaway cluster (PostgreSQL "
              f"{core.server_facts(conn)['postgres']}), autovacuum = {autovacuum}, naptime {naptime}; "
              + ", ".join(f"{k}={v}" for k, v in CLUSTER_SETTINGS.items() if k not in ("autovacuum", "autovacuum_naptime")))
    if vacuum_thread:
        print(f"server autovacuum = {autovacuum}: the bench ran VACUUM itself at autovacuum's thresholds, "
              f"{len(vacuums)} times ({sum(v[2] for v in vacuums):.1f}s in all)")
    elif cluster is None:
        print(f"server autovacuum = {autovacuum}, naptime {naptime}")
    print()
    print("| minute | probe dequeue p50 (ms) | p99 (ms) | dead tuples channel | dead tuples message | backlog "
          "| queue tables + indexes (kB) |")
    print("| ------ | ---------------------- | -------- | ------------------- | ------------------- | ------- "
          "| --------------------------- |")
    minutes = int(duration // 60) + (1 if duration % 60 else 0)
    for m in range(minutes):
        window = [ms for t, ms in probes if m * 60 <= t < (m + 1) * 60]
        in_minute = [d for d in dead if m * 60 <= d[0] < (m + 1) * 60]
        peak_channel = max((d[1].get("lonnymq_channel", 0) for d in in_minute), default=0)
        peak_message = max((d[1].get("lonnymq_message", 0) for d in in_minute), default=0)
        backlog = max((d[2] for d in in_minute), default=0)
        in_samples = [s for s in samples if m * 60 <= s["t"] < (m + 1) * 60]
        total = (sum(v["size"] for v in in_samples[-1]["tables"].values()) + sum(in_samples[-1]["indexes"].values())
                 if in_samples else 0)
        print(f"| {m + 1:6d} | {median(window):22.2f} | {percentile(window, 99):8.2f} | {peak_channel:19d} | "
              f"{peak_message:19d} | {backlog:7d} | {total / 1024:27,.0f} |")
    print()
    print(f"dequeue p50: first minute {median(first):.2f} ms, last minute {median(last_minute):.2f} ms, "
          f"ratio {ratio:.2f}x (target <= 1.5x): {'OK' if ratio <= 1.5 else 'OVER'}")
    print()
    window_s = min(args.window_minutes * 60, duration / 3)
    rows, grew = compare(samples, window_s, duration)
    print(f"first {window_s / 60:.3g} min vs last {window_s / 60:.3g} min (medians of the 10 s samples; "
          f"counts and rates: over the window):")
    print()
    print("| figure | first | last | last / first |")
    print("| ------ | ----- | ---- | ------------ |")
    for name, a, b in rows:
        print(f"| {name} | {fmt(a)} | {fmt(b)} | {ratio_text(a, b)} |")
    print()
    print("verdict: " + ("flat" if not grew else "grew: " + "; ".join(grew)))
    print(f"enqueued {enqueued[0]}, acked by workers {sum(s.get('acked', 0) for s in stats):.0f}, "
          f"workers' empty answers {sum(s.get('empty_fetches', 0) for s in stats):.0f}, backlog at the end "
          f"{samples[-1]['backlog']}, largest backlog {max(s['backlog'] for s in samples)}")
    if cluster is not None:
        counts: dict[str, int] = {}
        for line in autovacuum_log:
            m = re.search(r'automatic vacuum of table "[^"]*\.([^".]+)"', line)
            if m:
                counts[m[1]] = counts.get(m[1], 0) + 1
        print("autovacuum runs in the server's log: "
              + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"))
    print(f"lonnymq_health (exit {health.returncode}):")
    print(health.stdout.strip() or health.stderr.strip())


def sample(conn: Any, now: float, enqueued: int, recent: list[float]) -> dict[str, Any]:
    """One 10 s sample: the queue tables' statistics and sizes, their indexes' sizes, the
    backlog, the probe's p50/p99 over the last 10 s and the machine's load."""
    tables = {
        name: {"live": int(live), "dead": int(dead), "size": int(size), "autovacuum": int(auto), "vacuum": int(manual)}
        for name, live, dead, size, auto, manual in conn.execute(TABLE_STATS).fetchall()
    }
    indexes = {name: int(size) for name, size in conn.execute(INDEX_STATS).fetchall()}
    return {
        "t": round(now, 1),
        "enqueued": enqueued,
        "backlog": core.count_messages(conn),
        "p50": median(recent),
        "p99": percentile(recent, 99),
        "probes": len(recent),
        "load": os.getloadavg()[0],
        "tables": tables,
        "indexes": indexes,
    }


# What counts as growth between the first and the last window: more than 25% and more than
# this much (sizes in bytes: 8 pages).
FLOORS = {"ms": 0.25, "dead": 1000, "size": 65536, "backlog": 100}


def compare(samples: list[dict[str, Any]], window: float, duration: float) -> tuple[list[tuple[str, Any, Any]], list[str]]:
    """Rows (figure, first window, last window) and the figures that grew."""
    head = [s for s in samples if s["t"] <= window]
    tail = [s for s in samples if s["t"] >= duration - window]
    rows: list[tuple[str, Any, Any]] = []
    grew: list[str] = []

    def row(name: str, pick: Any, kind: str | None) -> None:
        a = median([pick(s) for s in head])
        b = median([pick(s) for s in tail])
        rows.append((name, a, b))
        if kind is not None and b > a * 1.25 and b - a > FLOORS[kind]:
            grew.append(f"{name} {fmt(a)} -> {fmt(b)} ({ratio_text(a, b)})")

    def over(s_list: list[dict[str, Any]], value: Any) -> float:
        return value(s_list[-1]) - value(s_list[0]) if len(s_list) > 1 else 0

    def rate(s_list: list[dict[str, Any]], value: Any) -> float:
        span = s_list[-1]["t"] - s_list[0]["t"] if len(s_list) > 1 else 0
        return over(s_list, value) / span if span else float("nan")

    row("probe dequeue p50 (ms)", lambda s: s["p50"], "ms")
    row("probe dequeue p99 (ms)", lambda s: s["p99"], "ms")
    row("backlog (messages)", lambda s: s["backlog"], "backlog")
    enq = lambda s: s["enqueued"]  # noqa: E731
    drained = lambda s: s["enqueued"] - s["backlog"]  # noqa: E731
    rows.append(("enqueue rate (msg/s)", rate(head, enq), rate(tail, enq)))
    rows.append(("drain rate (msg/s)", rate(head, drained), rate(tail, drained)))
    tables = sorted({t for s in samples for t in s["tables"]})
    for table in tables:
        sizes = [s["tables"].get(table, {}).get("size", 0) for s in samples]
        if not any(s["tables"].get(table, {}).get("dead", 0) > 100 for s in samples) and max(sizes) == min(sizes):
            continue  # hardly written to in this run
        row(f"{table}: dead tuples", lambda s, t=table: s["tables"].get(t, {}).get("dead", 0), "dead")
        row(f"{table}: live tuples", lambda s, t=table: s["tables"].get(t, {}).get("live", 0), None)
        row(f"{table}: size (kB)", lambda s, t=table: s["tables"].get(t, {}).get("size", 0) / 1024, None)
        last_rows = rows[-1]
        if last_rows[2] > last_rows[1] * 1.25 and (last_rows[2] - last_rows[1]) * 1024 > FLOORS["size"]:
            grew.append(f"{last_rows[0]} {fmt(last_rows[1])} -> {fmt(last_rows[2])} ({ratio_text(last_rows[1], last_rows[2])})")
        for key, label in (("autovacuum", "autovacuums"), ("vacuum", "other VACUUMs (workers')")):
            if not any(s["tables"].get(table, {}).get(key) for s in samples):
                continue
            rows.append((f"{table}: {label} in the window",
                         over(head, lambda s, t=table, k=key: s["tables"].get(t, {}).get(k, 0)),
                         over(tail, lambda s, t=table, k=key: s["tables"].get(t, {}).get(k, 0))))
    for index in sorted({i for s in samples for i in s["indexes"]}):
        if not any(s["indexes"].get(index, 0) > 16384 for s in samples):
            continue  # two pages or less all along
        a = median([s["indexes"].get(index, 0) / 1024 for s in head])
        b = median([s["indexes"].get(index, 0) / 1024 for s in tail])
        rows.append((f"index {index}: size (kB)", a, b))
        if b > a * 1.25 and (b - a) * 1024 > FLOORS["size"]:
            grew.append(f"index {index} {fmt(a)} kB -> {fmt(b)} kB ({ratio_text(a, b)})")
    rows.append(("load average (1 min)", median([s["load"] for s in head]), median([s["load"] for s in tail])))
    return rows, grew


def fmt(value: float) -> str:
    if value != value:  # nan
        return "-"
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.2f}"


def ratio_text(a: float, b: float) -> str:
    if not a or a != a or b != b:
        return "-"
    return f"{b / a:.2f}x"


def autovacuum_lines(path: str) -> list[str]:
    """The server log's "automatic vacuum of table ..." entries (log_autovacuum_min_duration = 0),
    each with its continuation lines joined."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    entries: list[str] = []
    for line in text.splitlines():
        if "automatic vacuum of table" in line:
            entries.append(line.strip())
        elif entries and line.startswith(("\t", " ")) and len(entries[-1]) < 4000:
            entries[-1] += " | " + line.strip()
        elif entries and not line.startswith(("\t", " ")):
            pass
    return entries


if __name__ == "__main__":
    main()
