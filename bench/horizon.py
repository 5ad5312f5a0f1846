"""A held snapshot: ``python -m bench.horizon`` (``--quick`` in about 5 minutes).

Cycles of ``--messages`` (20,000) messages drained by 4 ``run_queue_worker --burst``
processes (no-op handler, --concurrency 100, --batch-size 100), over 1,000 channels and over 1
channel, and the same cycles of a plain SKIP LOCKED table (``bench_plain``, 4
``bench.plain_worker`` processes, ``DELETE ... ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED``),
each series twice: free, and while another session holds a snapshot open (``BEGIN ISOLATION
LEVEL REPEATABLE READ; SELECT 1``, the way a long report, a ``pg_dump`` or a session idle in
transaction holds the xmin horizon back: VACUUM can then remove no row version deleted or
updated after it). A held series ends with one more cycle after the snapshot is released;
a free series runs as many cycles, so every cycle has its free twin measured in the same run.

Before every cycle the bench runs ``VACUUM`` on the tables it drains, standing in for
autovacuum (off on this server; ``--no-vacuum``: leave it to the workers' own VACUUM of the
channel table). While the snapshot is held that VACUUM removes nothing, which is the point.

Per cycle: messages/s from the end of the enqueue (one transaction) to the last ack (a cycle
not drained in ``--cycle-timeout`` seconds: what it drained in that time; the bench deletes
the rest), the median of ``--runs`` runs, and its ratio to the free series' same cycle. Then the server's
own counters for the cycle (medians too): dead row versions of the queue tables after it
(``pg_stat_user_tables.n_dead_tup``), heap and index blocks touched (``pg_statio_*``, hit +
read) and index entries read (``pg_stat_user_indexes.idx_tup_read``: dead entries count, as
the scan has to visit them) per 100 messages, and for the queue the dequeue calls and their
mean time (``pg_stat_user_functions``; the bench sets ``track_functions = pl`` on its
database). The workers' own VACUUMs of the channel table show as ``vacuum_count``.

``--probe CHANNELS`` measures one dequeue instead: a single connection takes the cycles' messages
100 at a time under a held snapshot and prints, every quarter cycle, what that call read from
each relation (index entries, blocks), from the counters of its own transaction.

The database is ``--database-url`` (default postgres://postgres@127.0.0.1:5432/lq_bench_horizon);
it is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from . import core
from .core import log, median

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_horizon"
QUEUE = "bench"
WORKERS = 4

# The relations whose counters a cycle reads, per kind of series.
QUEUE_TABLES = ("lonnymq_message", "lonnymq_channel")
QUEUE_INDEXES = (
    "lonnymq_message_ready_idx",
    "lonnymq_message_lease_idx",
    "lonnymq_message_pkey",
    "lonnymq_channel_eligible_idx",
    "lonnymq_channel_id_idx",
)
PLAIN_TABLES = ("bench_plain",)
PLAIN_INDEXES = ("bench_plain_pkey",)

COUNTERS = """
SELECT 'heap:' || s.relname, s.heap_blks_hit + s.heap_blks_read, t.n_dead_tup, t.vacuum_count
  FROM pg_statio_user_tables s JOIN pg_stat_user_tables t USING (relid)
 WHERE s.relname = ANY (%(tables)s)
UNION ALL
SELECT 'idx:' || s.indexrelname, s.idx_blks_hit + s.idx_blks_read, i.idx_tup_read, 0
  FROM pg_statio_user_indexes s JOIN pg_stat_user_indexes i USING (indexrelid)
 WHERE s.indexrelname = ANY (%(indexes)s)
UNION ALL
SELECT 'fn:' || funcname, calls, (total_time * 1000)::bigint, 0
  FROM pg_stat_user_functions WHERE funcname IN ('lonnymq_dequeue_v1', 'lonnymq_dequeue_held_v1')
"""


@dataclass
class Cycle:
    rate: float
    counters: dict[str, float]
    cut: bool = False  # not drained within --cycle-timeout: the rate of what was


@dataclass
class Series:
    """One kind of load, free and held: ``cycles[mode][i]`` is every run's i-th cycle."""

    label: str
    plain: bool
    channels: int
    cycles: dict[str, list[list[Cycle]]] = field(default_factory=lambda: {"free": [], "held": []})


def read_counters(conn: psycopg.Connection[Any], plain: bool) -> dict[str, tuple[float, float, float]]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute(
        COUNTERS,
        {
            "tables": list(PLAIN_TABLES if plain else QUEUE_TABLES),
            "indexes": list(PLAIN_INDEXES if plain else QUEUE_INDEXES),
        },
    ).fetchall()
    return {name: (float(a or 0), float(b or 0), float(c or 0)) for name, a, b, c in rows}


def cycle_counters(
    before: dict[str, tuple[float, float, float]], after: dict[str, tuple[float, float, float]], n: int
) -> dict[str, float]:
    """What a cycle did, from the counters around it: per 100 messages, and dead rows after."""
    per = n / 100
    out: dict[str, float] = {}
    for name, (a1, b1, c1) in after.items():
        a0, b0, c0 = before.get(name, (0.0, 0.0, 0.0))
        kind, rel = name.split(":", 1)
        if kind == "heap":
            out[f"{rel} blocks/100"] = (a1 - a0) / per
            out[f"{rel} dead after"] = b1
            out[f"{rel} vacuums"] = c1 - c0
        elif kind == "idx":
            out[f"{rel} blocks/100"] = (a1 - a0) / per
            out[f"{rel} entries read/100"] = (b1 - b0) / per
        else:
            calls = a1 - a0
            out[f"{rel} calls"] = calls
            out[f"{rel} ms/call"] = (b1 - b0) / 1000 / calls if calls else 0.0
    return out


class Bench:
    def __init__(
        self, url: str, messages: int, cycles: int, runs: int, vacuum: bool, cycle_timeout: float
    ) -> None:
        self.url = url
        self.cycle_timeout = cycle_timeout
        self.messages = messages
        self.cycles = cycles
        self.runs = runs
        self.vacuum = vacuum
        self.conn = core.connect(url)

    def _wait_drained(self, count: Callable[[], int], limit: float) -> float | None:
        """When the drain ended (perf_counter), or None when it did not within ``limit`` s."""
        deadline = time.perf_counter() + limit
        while count():
            if time.perf_counter() > deadline:
                return None
            time.sleep(0.02)
        return time.perf_counter()

    def _start(self, series: Series) -> tuple[list[core.Proc], Any]:
        """The series' 4 workers, up and waiting; for the queue, the sentinel (a message the
        bench holds leased, so that burst workers stay until the series is over)."""
        if series.plain:
            procs = [core.start_plain_worker(self.url, "drain", "--batch", "100") for _ in range(WORKERS)]
            for proc in procs:
                proc.wait_for("plain worker ready")
            return procs, None
        core.enqueue_many(self.conn, QUEUE, ["sentinel"])
        sentinel = core.dequeue(self.conn, QUEUE, 1)
        procs = [
            core.start_worker(self.url, QUEUE, "--burst", "--concurrency", "100", "--batch-size", "100")
            for _ in range(WORKERS)
        ]
        for proc in procs:
            proc.wait_for(r"lonnymq worker .*: queues=")
        return procs, sentinel

    def _cycle(self, series: Series, names: list[str]) -> Cycle:
        tables = PLAIN_TABLES if series.plain else QUEUE_TABLES
        if self.vacuum:
            self.conn.execute(f"VACUUM {', '.join(tables)}")
        time.sleep(1.2)  # every backend's statistics flushed (at most once a second)
        before = read_counters(self.conn, series.plain)
        with self.conn.transaction():
            if series.plain:
                first = self.conn.execute("SELECT nextval('bench_plain_id_seq')").fetchone()[0]  # type: ignore[index]
                core.fill_plain(self.conn, self.messages)
                self.conn.execute("NOTIFY bench_plain")
                table = "bench_plain"
            else:
                first = None
                for start in range(0, self.messages, 10_000):
                    chunk = [
                        names[(start + i) % len(names)] for i in range(min(10_000, self.messages - start))
                    ]
                    ids = core.enqueue_many(self.conn, QUEUE, chunk)
                    first = min(ids) if first is None else first
                table = "lonnymq_message"
            # Statistics of the filled table, committed with the rows: the VACUUM above ran on
            # an empty table, and from its statistics (one row) the planner runs the plain
            # dequeue as a nested loop that repeats the SKIP LOCKED subquery for every row,
            # minutes per statement over dead rows (the queue's own calls plan without them).
            self.conn.execute(f"ANALYZE {', '.join(tables)}")
        # The poll walks this cycle's ids from the top: the last to go in both designs, so it
        # reads no dead entry until the end (from the front, it would read the held ones).
        poll = f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE id >= %s ORDER BY id DESC LIMIT 1) AS t"
        t0 = time.perf_counter()
        t1 = self._wait_drained(
            lambda: int(self.conn.execute(poll, [first], prepare=True).fetchone()[0]),  # type: ignore[index]
            self.cycle_timeout,
        )
        cut = t1 is None
        if t1 is None:
            # Too slow to wait for: the rate of what it drained in the time, then the bench
            # deletes the rest (dead rows, as the workers' deletes would have left).
            t1 = time.perf_counter()
            left = int(
                self.conn.execute(f"SELECT count(*) FROM {table} WHERE id >= %s", [first]).fetchone()[0]
            )  # type: ignore[index]
            self.conn.execute(f"DELETE FROM {table} WHERE id >= %s", [first])
            drained = self.messages - left
        else:
            drained = self.messages
        time.sleep(1.2)
        after = read_counters(self.conn, series.plain)
        return Cycle(drained / (t1 - t0), cycle_counters(before, after, max(drained, 1)), cut)

    def series(self, series: Series, held: bool) -> list[Cycle]:
        core.reset(self.conn)
        tables = PLAIN_TABLES if series.plain else QUEUE_TABLES
        self.conn.execute(f"VACUUM {', '.join(tables)}")
        names = [f"tenant-{i}" for i in range(series.channels)]
        procs, sentinel = self._start(series)
        holder = None
        out: list[Cycle] = []
        try:
            if held:
                holder = psycopg.connect(self.url, autocommit=True, application_name="lonnymq-bench-holder")
                holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                holder.execute("SELECT 1")
            for i in range(self.cycles + 1):
                if held and i == self.cycles:
                    assert holder is not None
                    holder.execute("COMMIT")
                out.append(self._cycle(series, names))
                c = out[-1].counters
                dead = sum(v for k, v in c.items() if k.endswith("dead after"))
                mode = "held" if held and i < self.cycles else ("released" if held else "free")
                log(
                    f"{series.label}, {mode}, cycle {i + 1}: {out[-1].rate:,.0f} msg/s{' (cut)' if out[-1].cut else ''}, {dead:,.0f} dead rows"
                )
            if sentinel is not None:
                core.ack(self.conn, sentinel)
                for proc in procs:
                    proc.wait(timeout=120)
        finally:
            if holder is not None:
                holder.close()
            for proc in procs:
                if proc.popen.poll() is None:
                    proc.stop()
        return out

    def run(self, all_series: list[Series]) -> None:
        for run in range(self.runs):
            for series in all_series:
                # Free then held in one run, held first every other run (the machine drifts).
                modes = ("free", "held") if run % 2 == 0 else ("held", "free")
                for mode in modes:
                    series.cycles[mode].append(self.series(series, mode == "held"))


KEY_COUNTERS = {
    False: (
        ("dead rows", lambda c: c["lonnymq_message dead after"] + c["lonnymq_channel dead after"]),
        ("dequeue ms/call", lambda c: c["lonnymq_dequeue_v1 ms/call"]),
        (
            "dequeue calls",
            lambda c: c["lonnymq_dequeue_v1 calls"] + c.get("lonnymq_dequeue_held_v1 calls", 0),
        ),
        ("ready idx entries/100", lambda c: c["lonnymq_message_ready_idx entries read/100"]),
        ("ready idx blocks/100", lambda c: c["lonnymq_message_ready_idx blocks/100"]),
        ("eligible idx entries/100", lambda c: c["lonnymq_channel_eligible_idx entries read/100"]),
        ("eligible idx blocks/100", lambda c: c["lonnymq_channel_eligible_idx blocks/100"]),
        ("channel heap blocks/100", lambda c: c["lonnymq_channel blocks/100"]),
        ("message heap blocks/100", lambda c: c["lonnymq_message blocks/100"]),
        ("channel VACUUMs", lambda c: c["lonnymq_channel vacuums"]),
    ),
    True: (
        ("dead rows", lambda c: c["bench_plain dead after"]),
        ("pkey entries/100", lambda c: c["bench_plain_pkey entries read/100"]),
        ("pkey blocks/100", lambda c: c["bench_plain_pkey blocks/100"]),
        ("heap blocks/100", lambda c: c["bench_plain blocks/100"]),
    ),
}


def _fmt(value: float) -> str:
    if value != value:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else (f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}")


def report(all_series: list[Series], bench: Bench) -> None:
    cycles = bench.cycles
    labels = [f"cycle {i + 1}" for i in range(cycles)] + ["released"]
    for series in all_series:
        free, held = series.cycles["free"], series.cycles["held"]
        print()
        print(f"{series.label}: msg/s (medians of {bench.runs} run{'s' if bench.runs > 1 else ''})")
        header = f"  {'':<26}" + "".join(f"{label:>12}" for label in labels)
        print(header)
        free_rates = [median([run[i].rate for run in free]) for i in range(cycles + 1)]
        held_rates = [median([run[i].rate for run in held]) for i in range(cycles + 1)]
        print(f"  {'free':<26}" + "".join(f"{_fmt(r):>12}" for r in free_rates))
        cut = ["*" if any(run[i].cut for run in held) else "" for i in range(cycles + 1)]
        print(
            f"  {'held (last: released)':<26}"
            + "".join(f"{_fmt(r) + c:>12}" for r, c in zip(held_rates, cut, strict=True))
        )
        print(
            f"  {'ratio held / free':<26}"
            + "".join(f"{h / f:>11.2f}x" for h, f in zip(held_rates, free_rates, strict=True))
        )
        for name, get in KEY_COUNTERS[series.plain]:
            for mode, runs in (("free", free), ("held", held)):
                values = []
                for i in range(cycles + 1):
                    try:
                        values.append(median([get(run[i].counters) for run in runs]))
                    except KeyError:
                        values.append(float("nan"))
                print(f"  {name + ', ' + mode:<26}" + "".join(f"{_fmt(v):>12}" for v in values))


PROBE_RELATIONS = (
    "lonnymq_channel_eligible_idx",
    "lonnymq_channel",
    "lonnymq_channel_id_idx",
    "lonnymq_message_ready_idx",
    "lonnymq_message",
)


def probe(url: str, channels: int, messages: int, cycles: int) -> None:
    """``--probe``: what one dequeue of 100 reads, relation by relation, as the messages
    taken under a held snapshot add up; one connection, no workers, so the counters are this
    call's own (``pg_stat_get_xact_*`` inside its transaction)."""
    core.recreate_database(url)
    conn = core.connect(url)
    oids = [conn.execute("SELECT %s::regclass::oid", [r]).fetchone()[0] for r in PROBE_RELATIONS]  # type: ignore[index]
    counters = "SELECT " + ", ".join(
        f"pg_stat_get_xact_tuples_returned({oid}), pg_stat_get_xact_blocks_fetched({oid})" for oid in oids
    )
    holder = psycopg.connect(url, autocommit=True, application_name="lonnymq-bench-holder")
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1")
    names = [f"tenant-{i}" for i in range(channels)]
    print(
        f"one dequeue of 100 over {channels:,} channel(s) while a snapshot is held: entries read (e), blocks (b)"
    )
    print(f"{'taken':>8} {'ms':>6} " + " ".join(f"{r.removeprefix('lonnymq_'):>22}" for r in PROBE_RELATIONS))
    taken, every = 0, max(messages // 4, 100)
    try:
        for _ in range(cycles):
            core.fill(conn, QUEUE, messages, names)
            while True:
                with conn.transaction():
                    before = conn.execute(counters).fetchone()
                    started = time.perf_counter()
                    got = core.dequeue(conn, QUEUE, 100)
                    ms = (time.perf_counter() - started) * 1000
                    after = conn.execute(counters).fetchone()
                if not got:
                    break
                core.ack(conn, got)
                if taken % every == 0:
                    assert before is not None and after is not None
                    delta = [a - b for a, b in zip(after, before, strict=True)]
                    cells = " ".join(
                        f"{delta[2 * i]:>11,}e {delta[2 * i + 1]:>8,}b" for i in range(len(oids))
                    )
                    print(f"{taken:>8,} {ms:>6.1f} {cells}", flush=True)
                taken += len(got)
    finally:
        holder.close()
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("LONNYMQ_BENCH_HORIZON_URL", DEFAULT_URL))
    parser.add_argument("--quick", action="store_true", help="3 held cycles of 10,000 messages, 1 run")
    parser.add_argument("--messages", type=int, default=None, help="messages per cycle (20,000)")
    parser.add_argument("--cycles", type=int, default=None, help="cycles while the snapshot is held (5)")
    parser.add_argument("--runs", type=int, default=None, help="runs, each figure their median (3)")
    parser.add_argument("--only", default="many,one,plain", help="series: many (1,000 channels), one, plain")
    parser.add_argument(
        "--cycle-timeout",
        type=float,
        default=30.0,
        help="a cycle not drained in this many s counts what it drained, the bench deletes the rest (30)",
    )
    parser.add_argument(
        "--probe",
        type=int,
        default=None,
        metavar="CHANNELS",
        help="instead: one connection's dequeues of 100 over CHANNELS channels under a held snapshot, "
        "what each reads by relation",
    )
    parser.add_argument("--no-vacuum", action="store_true", help="no VACUUM by the bench before a cycle")
    args = parser.parse_args()
    messages = args.messages or (10_000 if args.quick else 20_000)
    cycles = args.cycles or (3 if args.quick else 5)
    runs = args.runs or (1 if args.quick else 3)
    if args.probe is not None:
        probe(args.database_url, args.probe, messages, cycles)
        return

    started = time.monotonic()
    core.recreate_database(args.database_url)
    dbname = args.database_url.rsplit("/", 1)[1]
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" SET track_functions = pl')
    bench = Bench(
        args.database_url, messages, cycles, runs, vacuum=not args.no_vacuum, cycle_timeout=args.cycle_timeout
    )
    facts = {**core.machine_facts(), **core.server_facts(bench.conn)}
    facts["autovacuum"] = str(bench.conn.execute("SHOW autovacuum").fetchone()[0])  # type: ignore[index]
    wanted = set(args.only.split(","))
    all_series = [
        s
        for key, s in (
            ("many", Series("1,000 channels, 4 workers", False, 1000)),
            ("one", Series("1 channel, 4 workers", False, 1)),
            ("plain", Series("plain SKIP LOCKED table, 4 workers", True, 1)),
        )
        if key in wanted
    ]
    bench.run(all_series)
    facts["load after"] = core.machine_facts().get("load", "?")
    print(
        f"held snapshot: cycles of {messages:,} messages, {cycles} held then 1 released, "
        f"{'a VACUUM before each cycle' if bench.vacuum else 'no VACUUM by the bench'}, "
        f"{time.monotonic() - started:.0f} s"
    )
    print("  " + ", ".join(f"{k}: {v}" for k, v in facts.items()))
    print("  per 100 messages: blocks hit + read, index entries read (dead ones included), whole cycle")
    print(f"  *: not drained within {bench.cycle_timeout:g} s, the rate of what it drained meanwhile")
    report(all_series, bench)


if __name__ == "__main__":
    main()
