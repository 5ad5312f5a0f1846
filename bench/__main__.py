"""The benchmark table: ``python -m bench`` (``--quick`` in under 5 minutes, ``--full`` adds 1M).

Every figure is the median of 3 runs (``--runs``) and is shown next to a baseline measured in
the same run: a plain SKIP LOCKED queue table (``bench_plain``: bigserial id, the same ~100-byte
JSON payload, dequeue = ``DELETE ... WHERE id IN (SELECT ... ORDER BY id LIMIT n FOR UPDATE SKIP
LOCKED) RETURNING``). The plain table has no lease, no fairness, no retries: the ratio says what
those cost (or, for fairness, what they buy).

What is measured (see docs/performance.md for the method):

* enqueue: one message per transaction, and ``enqueue_many`` batches of 100;
* drain: real ``manage.py run_queue_worker --burst`` processes (no-op handler, --concurrency
  100, --batch-size 100) emptying N messages in one channel with 1, 2 and 4 workers, and the
  same load over 100 channels; the workers' "empty" answers (stats.empty_fetches) are counted;
* latency from enqueue to handler start with an idle worker (p50, p99);
* the cost of one dequeue of 100 at backlogs of 1k and 100k (1M with --full) over 10 and
  1000 channels;
* fairness: the position at which a small tenant's last message comes out while a big tenant
  holds 100k ready messages, dequeuing 1 and 100 at a time;
* hot channel: 8 producers in open transactions into one channel vs spread over 8 channels.

The database is ``LONNYMQ_BENCH_DATABASE_URL`` or ``--database-url`` (default
postgres://postgres@127.0.0.1:5432/lq_bench); it is dropped and recreated.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from . import core
from .core import PAYLOAD, PAYLOAD_TEXT, log, median, percentile

QUEUE = "bench"


@dataclass
class Row:
    name: str
    unit: str
    ours: list[float] = field(default_factory=list)
    base: list[float] = field(default_factory=list)
    note: str = ""
    higher_is_better: bool = True

    def cells(self) -> tuple[str, str, str, str]:
        ours = median(self.ours) if self.ours else float("nan")
        base = median(self.base) if self.base else float("nan")
        ratio = ours / base if self.base and base else float("nan")
        return _fmt(ours), _fmt(base) if self.base else "-", (f"{ratio:.2f}x" if ratio >= 0.01 else f"{ratio:.1e}x") if self.base else "-", self.note


def _fmt(value: float) -> str:
    if value != value:  # nan
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


class Bench:
    def __init__(self, url: str, runs: int, quick: bool, full: bool) -> None:
        self.url = url
        self.runs = runs
        self.quick = quick
        self.full = full
        self.conn = core.connect(url)
        self.rows: list[Row] = []

    def row(self, name: str, unit: str, note: str = "", higher_is_better: bool = True) -> Row:
        row = Row(name, unit, note=note, higher_is_better=higher_is_better)
        self.rows.append(row)
        return row

    # -- enqueue -------------------------------------------------------------------------

    def enqueue(self) -> None:
        n_one = 1000 if self.quick else 5000
        n_many = 20_000 if self.quick else 100_000
        one = self.row("enqueue, 1 message per transaction", "msg/s")
        many = self.row("enqueue_many, 100 per call", "msg/s")
        channels = [f"tenant-{i}" for i in range(10)]
        for run in range(self.runs):
            core.reset(self.conn)
            t = time.perf_counter()
            for i in range(n_one):
                self.conn.execute("SELECT lonnymq_enqueue_v1(%s, %s, %s::jsonb)",
                                  [QUEUE, channels[i % 10], PAYLOAD_TEXT], prepare=True)
            one.ours.append(n_one / (time.perf_counter() - t))
            t = time.perf_counter()
            for _ in range(n_one):
                self.conn.execute("INSERT INTO bench_plain (payload) VALUES (%s::jsonb)", [PAYLOAD_TEXT], prepare=True)
            one.base.append(n_one / (time.perf_counter() - t))

            core.reset(self.conn)
            t = time.perf_counter()
            for start in range(0, n_many, 100):
                core.enqueue_many(self.conn, QUEUE, [channels[(start + i) % 10] for i in range(100)])
            many.ours.append(n_many / (time.perf_counter() - t))
            t = time.perf_counter()
            for _ in range(0, n_many, 100):
                self.conn.execute("INSERT INTO bench_plain (payload) SELECT p FROM unnest(%s::jsonb[]) AS u(p)",
                                  [[PAYLOAD_TEXT] * 100], prepare=True)
            many.base.append(n_many / (time.perf_counter() - t))
            log(f"enqueue run {run + 1}: one {one.ours[-1]:.0f}/s (plain {one.base[-1]:.0f}/s), "
                f"many {many.ours[-1]:.0f}/s (plain {many.base[-1]:.0f}/s)")

    # -- drain ---------------------------------------------------------------------------

    def _wait_empty(self, count: Callable[[], int], target: int, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while count() > target:
            if time.monotonic() > deadline:
                raise RuntimeError("the drain did not finish in time")
            time.sleep(0.02)
        return time.perf_counter()

    def _drain_ours(self, workers: int, channels: int, n: int) -> tuple[list[float], float]:
        """Rates (msg/s, one per run) of ``workers`` burst workers draining n messages, and
        their empty answers per run. The same worker processes serve every run: a sentinel
        message leased by the bench keeps them from exiting (something is in flight) until
        the last run is over, and they are all up before the first one starts."""
        core.reset(self.conn)
        core.enqueue_many(self.conn, QUEUE, ["sentinel"])
        sentinel = core.dequeue(self.conn, QUEUE, 1)
        procs = [core.start_worker(self.url, QUEUE, "--burst", "--concurrency", "100", "--batch-size", "100")
                 for _ in range(workers)]
        rates = []
        try:
            for proc in procs:
                proc.wait_for(r"lonnymq worker .*: queues=")
            names = [f"tenant-{i}" for i in range(channels)]
            for _ in range(self.runs):
                # What autovacuum would have done between two bursts (this CI server runs with
                # autovacuum = off): every release rewrites a channel row, so without it each
                # run would start with the previous runs' dead index entries.
                self.conn.execute("VACUUM lonnymq_channel, lonnymq_message")
                time.sleep(0.5)
                with self.conn.transaction():
                    core.fill(self.conn, QUEUE, n, names)
                t0 = time.perf_counter()
                t1 = self._wait_empty(lambda: core.count_messages(self.conn, up_to=2), 1, 600)
                rates.append(n / (t1 - t0))
            core.ack(self.conn, sentinel)
            for proc in procs:
                proc.wait(timeout=60)
        finally:
            for proc in procs:
                if proc.popen.poll() is None:
                    proc.stop()
        stats = [core.worker_stats(p) for p in procs]
        return rates, sum(s.get("empty_fetches", 0) for s in stats) / self.runs

    def _drain_plain(self, workers: int, n: int) -> tuple[list[float], float]:
        core.reset(self.conn)
        procs = [core.start_plain_worker(self.url, "drain", "--batch", "100") for _ in range(workers)]
        rates = []
        try:
            for proc in procs:
                proc.wait_for("plain worker ready")
            for _ in range(self.runs):
                self.conn.execute("VACUUM bench_plain")
                time.sleep(0.5)
                with self.conn.transaction():
                    core.fill_plain(self.conn, n)
                    self.conn.execute("NOTIFY bench_plain")
                t0 = time.perf_counter()
                t1 = self._wait_empty(lambda: core.count_plain(self.conn, up_to=1), 0, 600)
                rates.append(n / (t1 - t0))
        finally:
            for proc in procs:
                proc.stop()
        empty = 0.0
        for proc in procs:
            for line in proc.lines:
                if "empty_fetches=" in line:
                    empty += float(line.split("empty_fetches=")[1].split()[0])
        return rates, empty / self.runs

    def drain(self) -> None:
        n = 20_000 if self.quick else 100_000
        plain: dict[int, tuple[list[float], float]] = {}
        for channels, workers_list in ((1, (1, 2, 4)), (100, (1, 4))):
            for workers in workers_list:
                label = (f"drain {n // 1000}k, {channels} channel{'s' if channels > 1 else ''}, "
                         f"{workers} worker{'s' if workers > 1 else ''}")
                row = self.row(label, "msg/s")
                row.ours, empty = self._drain_ours(workers, channels, n)
                if workers not in plain:
                    plain[workers] = self._drain_plain(workers, n)
                row.base = plain[workers][0]
                row.note = (f"empty answers per run: {empty:.0f} (plain: {plain[workers][1]:.0f}); "
                            "includes ~1 per worker while waiting for the start")
                log(f"{label}: {', '.join(f'{r:.0f}' for r in row.ours)}/s, {empty:.0f} empty answers per run "
                    f"(plain: {', '.join(f'{r:.0f}' for r in row.base)}/s)")

    # -- latency -------------------------------------------------------------------------

    def _latencies(self, start: Callable[[str], core.Proc], ready: str, produce: Callable[[int], None],
                   count: int) -> list[float]:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "latency.txt"
            path.touch()
            proc = start(str(path))
            try:
                proc.wait_for(ready)
                time.sleep(1.0)
                rng = random.Random(7)
                for i in range(count):
                    produce(i)
                    time.sleep(rng.uniform(0.02, 0.04))
                deadline = time.monotonic() + 30
                while len(path.read_text().splitlines()) < count and time.monotonic() < deadline:
                    time.sleep(0.05)
            finally:
                proc.stop()
            return [float(line.split()[1]) * 1000 for line in path.read_text().splitlines()]

    def latency(self) -> None:
        count = 100 if self.quick else 300
        p50 = self.row("enqueue-to-start latency p50, idle worker", "ms", higher_is_better=False)
        p99 = self.row("enqueue-to-start latency p99, idle worker", "ms", higher_is_better=False)

        def ours(i: int) -> None:
            payload = dict(PAYLOAD, t=time.time())
            self.conn.execute("SELECT lonnymq_enqueue_v1('bench_latency', %s, %s::jsonb)",
                              [f"tenant-{i % 10}", psycopg.types.json.Json(payload)], prepare=True)

        def plain(i: int) -> None:
            payload = dict(PAYLOAD, t=time.time())
            self.conn.execute(
                "WITH i AS (INSERT INTO bench_plain (payload) VALUES (%s::jsonb) RETURNING 1)"
                " SELECT pg_notify('bench_plain', '') FROM i",
                [psycopg.types.json.Json(payload)], prepare=True,
            )

        for run in range(self.runs):
            core.reset(self.conn)
            got = self._latencies(
                lambda path: core.start_worker(self.url, "bench_latency", "--concurrency", "4", "--batch-size", "100",
                                               LONNYMQ_BENCH_LATENCY_FILE=path),
                r"lonnymq worker .*: queues=", ours, count)
            base = self._latencies(
                lambda path: core.start_plain_worker(self.url, "latency", "--file", path),
                "plain worker ready", plain, count)
            p50.ours.append(percentile(got, 50))
            p99.ours.append(percentile(got, 99))
            p50.base.append(percentile(base, 50))
            p99.base.append(percentile(base, 99))
            log(f"latency run {run + 1}: p50 {p50.ours[-1]:.1f} ms p99 {p99.ours[-1]:.1f} ms "
                f"(plain + NOTIFY: {p50.base[-1]:.1f} / {p99.base[-1]:.1f} ms), {len(got)}/{count} measured")

    # -- dequeue cost --------------------------------------------------------------------

    def dequeue_cost(self) -> None:
        backlogs = [1_000, 100_000] + ([1_000_000] if self.full else [])
        samples = 30
        for backlog in backlogs:
            for channels in (10, 1000):
                if backlog < channels:
                    continue
                row = self.row(f"one dequeue of 100, backlog {backlog // 1000}k over {channels} channels", "ms",
                               higher_is_better=False)
                names = [f"tenant-{i}" for i in range(channels)]
                core.reset(self.conn)
                core.fill(self.conn, QUEUE, backlog, names)
                core.fill_plain(self.conn, backlog)
                self.conn.execute("VACUUM ANALYZE lonnymq_message, lonnymq_channel, bench_plain")
                refill = 0
                for run in range(self.runs):
                    ours, base = [], []
                    for _ in range(samples):
                        t = time.perf_counter()
                        got = core.dequeue(self.conn, QUEUE, 100)
                        ours.append((time.perf_counter() - t) * 1000)
                        core.ack(self.conn, got)  # and put back as many, to keep the backlog
                        core.enqueue_many(self.conn, QUEUE, [names[(refill + i) % channels] for i in range(len(got))])
                        refill += len(got)
                        t = time.perf_counter()
                        rows = self.conn.execute(core.PLAIN_DEQUEUE, [100], prepare=True).fetchall()
                        base.append((time.perf_counter() - t) * 1000)
                        self.conn.execute("INSERT INTO bench_plain (payload) SELECT p FROM unnest(%s::jsonb[]) AS u(p)",
                                          [[PAYLOAD_TEXT] * len(rows)], prepare=True)
                    row.ours.append(median(ours))
                    row.base.append(median(base))
                    log(f"{row.name} run {run + 1}: {row.ours[-1]:.2f} ms (plain {row.base[-1]:.2f} ms)")

    # -- fairness ------------------------------------------------------------------------

    def fairness(self) -> None:
        big = 100_000
        small = 50
        core.reset(self.conn)
        core.fill(self.conn, QUEUE, big, ["big-tenant"])
        self.conn.execute("VACUUM ANALYZE lonnymq_message, lonnymq_channel")
        for batch in (1, 100):
            row = self.row(f"fairness: position of a small tenant's {small}th message, batch {batch}", "position",
                           higher_is_better=False,
                           note=f"big tenant holds {big // 1000}k ready; ideal ~{2 * small}; plain = FIFO position")
            wait = self.row(f"fairness: time until the small tenant's last message, batch {batch}", "ms",
                            higher_is_better=False, note="one dequeuer in the bench process, acks after")
            for run in range(self.runs):
                name = f"small-{batch}-{run}"
                core.enqueue_many(self.conn, QUEUE, [name] * small)
                backlog = core.count_messages(self.conn) - small
                position = seen = count = 0
                leased: list[tuple[Any, ...]] = []
                t = time.perf_counter()
                while seen < small:
                    got = core.dequeue(self.conn, QUEUE, batch)
                    if not got:
                        raise RuntimeError("fairness: the queue ran dry")
                    for r in got:
                        count += 1
                        if r[1] == name:
                            seen += 1
                            position = count
                    leased += got
                elapsed = (time.perf_counter() - t) * 1000
                core.ack(self.conn, leased)
                row.ours.append(position)
                row.base.append(backlog + small)  # FIFO: after everything already there
                wait.ours.append(elapsed)
                log(f"fairness batch {batch} run {run + 1}: position {position} of {backlog + small}, {elapsed:.1f} ms")

    # -- hot channel ---------------------------------------------------------------------

    def _producers(self, seconds: float, channel_of: Callable[[int], str] | None) -> tuple[float, float, float]:
        """8 producers, each: BEGIN; enqueue 1; 5 ms of other work; COMMIT. A drainer empties
        the queue meanwhile. ``channel_of`` None means the plain table. Returns (commits/s,
        p99 of the enqueue statement in ms, share of transaction time spent in it)."""
        stop = threading.Event()
        commits = [0] * 8
        waits: list[list[float]] = [[] for _ in range(8)]
        busy = [0.0] * 8
        total = [0.0] * 8

        def producer(i: int) -> None:
            conn = core.connect(self.url, autocommit=False)
            try:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    if channel_of is None:
                        conn.execute("INSERT INTO bench_plain (payload) VALUES (%s::jsonb)", [PAYLOAD_TEXT], prepare=True)
                    else:
                        conn.execute("SELECT lonnymq_enqueue_v1('bench_hot', %s, %s::jsonb)",
                                     [channel_of(i), PAYLOAD_TEXT], prepare=True)
                    t1 = time.perf_counter()
                    time.sleep(0.005)
                    conn.commit()
                    t2 = time.perf_counter()
                    commits[i] += 1
                    waits[i].append((t1 - t0) * 1000)
                    busy[i] += t1 - t0
                    total[i] += t2 - t0
            finally:
                conn.close()

        def drainer() -> None:
            conn = core.connect(self.url)
            try:
                while not stop.is_set():
                    if channel_of is None:
                        got = conn.execute(core.PLAIN_DEQUEUE, [100], prepare=True).fetchall()
                    else:
                        got = core.dequeue(conn, "bench_hot", 100)
                        core.ack(conn, got)
                    if not got:
                        time.sleep(0.002)
            finally:
                conn.close()

        threads = [threading.Thread(target=producer, args=(i,)) for i in range(8)] + [threading.Thread(target=drainer)]
        for thread in threads:
            thread.start()
        time.sleep(seconds)
        stop.set()
        for thread in threads:
            thread.join()
        all_waits = [w for ws in waits for w in ws]
        return sum(commits) / seconds, percentile(all_waits, 99), sum(busy) / max(sum(total), 1e-9)

    def hot_channel(self) -> None:
        seconds = 4.0 if self.quick else 10.0
        one = self.row("8 producers in open transactions, one channel", "commit/s")
        spread = self.row("8 producers in open transactions, 8 channels", "commit/s")
        ratio = self.row("hot channel: one channel / 8 channels", "ratio", note="target ~1 (seed design: 0.13)")
        p99 = self.row("hot channel: p99 of the enqueue statement, one channel", "ms", higher_is_better=False)
        for run in range(self.runs):
            core.reset(self.conn)
            rate_one, wait_one, share_one = self._producers(seconds, lambda i: "hot")
            rate_spread, _, _ = self._producers(seconds, lambda i: f"tenant-{i}")
            rate_plain, wait_plain, _ = self._producers(seconds, None)
            one.ours.append(rate_one)
            one.base.append(rate_plain)
            spread.ours.append(rate_spread)
            spread.base.append(rate_plain)
            ratio.ours.append(rate_one / rate_spread)
            p99.ours.append(wait_one)
            p99.base.append(wait_plain)
            one.note = f"enqueue statement = {share_one:.0%} of the transaction time"
            log(f"hot channel run {run + 1}: one {rate_one:.0f}/s, spread {rate_spread:.0f}/s, plain {rate_plain:.0f}/s, "
                f"p99 enqueue {wait_one:.1f} ms, {share_one:.0%} of the time in the enqueue")

    # -- output ----------------------------------------------------------------------------

    def table(self) -> str:
        head = ("measurement", "unit", "lonnymq", "plain SKIP LOCKED", "ratio", "notes")
        body = [(r.name, r.unit, *r.cells()) for r in self.rows]
        widths = [max(len(str(line[i])) for line in [head, *body]) for i in range(len(head))]
        lines = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(head, widths, strict=True)) + " |",
                 "| " + " | ".join("-" * w for w in widths) + " |"]
        lines += ["| " + " | ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)) + " |" for line in body]
        return "\n".join(lines)


SECTIONS = ("enqueue", "drain", "latency", "dequeue_cost", "fairness", "hot_channel")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller loads: finishes in under 5 minutes")
    parser.add_argument("--full", action="store_true", help="also the 1M-message backlog")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (the table shows medians)")
    parser.add_argument("--database-url", default=None, help=f"default {core.DEFAULT_URL}")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--no-setup", action="store_true", help="reuse the database as it is")
    args = parser.parse_args()

    url = core.database_url(args.database_url)
    started = time.monotonic()
    if not args.no_setup:
        log(f"setting up {url} ...")
        core.recreate_database(url)
    bench = Bench(url, args.runs, args.quick, args.full)
    for section in args.only.split(","):
        if section not in SECTIONS:
            raise SystemExit(f"unknown section {section!r}; choose from {', '.join(SECTIONS)}")
        log(f"--- {section}")
        getattr(bench, section)()
    facts = {**core.machine_facts(), **core.server_facts(bench.conn)}
    print()
    print(f"lonnymq benchmark ({'quick' if args.quick else 'full' if args.full else 'default'}), medians of "
          f"{args.runs} runs, {time.monotonic() - started:.0f}s; " + ", ".join(f"{k} {v}" for k, v in facts.items()))
    print()
    print(bench.table())


if __name__ == "__main__":
    main()
