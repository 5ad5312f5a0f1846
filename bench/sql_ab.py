"""The queue's SQL at an earlier migration against the live SQL, in one run: ``python -m bench.sql_ab``.

What a change of the SQL functions costs on the hot path. Two databases are built side by
side, one migrated up to ``--base`` (default: the migration before the latest), one to the
latest; then, in rounds that alternate between them (so a busy machine slows both alike),
the same work runs on each:

* enqueue 1: ``--singles`` single enqueues, one transaction each, 10 channels;
* enqueue 100: batches of 100 messages over 100 channels (the app's ``lonnymq_enqueue_many_v4``,
  or what it called on a base migrated before 0053);
* enqueue 2,000 channels: ``--wide`` calls of the app's bulk enqueue
  (``lonnymq_enqueue_many_v4``, or what it called before 0053) of 2,000 messages, one per channel (past
  64 channels it takes stripe locks since 0040);
* dequeue+ack 100: with 1,000 backlogged channels, lease 100 messages and ack them, until
  ``--drain`` messages are done; then the same with every channel capped at 1,000 (the caps'
  bookkeeping runs, nothing waits for a slot).

Each figure is the median of the rounds' time per operation; the ratio is live / base of the
same round, median over rounds (1.00 = no change). Statements are prepared, as a worker's are.
``--cpu`` reports the server backend's CPU time per operation instead of the wall-clock time
(its utime + stime from /proc, so only with the server on this machine): on a shared machine
the wall clock moves with everyone's load, the backend's own CPU time much less.
``--functions`` says where a drain's time goes: each SQL function's own time (the server's
``pg_stat_user_functions`` self time, ``track_functions = pl``) per dequeue+ack of 100,
uncapped and capped, the version suffix left out so that ``_v1`` and ``_v2`` of a function
share a row.
Databases: ``--database-url`` with ``_base`` / ``_live`` appended to its name (dropped and
created again).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import conninfo

from django_lonnymq import sql

from . import core

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_sql_ab"
QUEUE = "ab"


def migrations() -> list[str]:
    return sorted({f.split(".")[0] for f in sql.migration_files()})


def build(url: str, target: str) -> None:
    params = conninfo.conninfo_to_dict(url)
    admin = conninfo.make_conninfo(url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{params["dbname"]}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{params["dbname"]}"')
    subprocess.run(
        [sys.executable, str(core.ROOT / "manage.py"), "migrate", "django_lonnymq", target, "-v", "0"],
        cwd=core.ROOT, env=core.worker_env(url), check=True,
    )  # fmt: skip


def with_suffix(url: str, suffix: str) -> str:
    """The postgres:// URL of a sibling database (the workers' settings read URLs)."""
    head, _, name = url.rpartition("/")
    name, _, query = name.partition("?")
    return f"{head}/{name}_{suffix}" + (f"?{query}" if query else "")


# The single enqueue before lonnymq_enqueue_v4 (migration 0053 added the slots).
ENQUEUE_V3 = (
    "SELECT lonnymq_enqueue_v3(%(queue)s::text, %(channel)s::text, %(payload)s::jsonb, %(run_at_ms)s::bigint,"
    " %(delay_ms)s::bigint, %(priority)s::integer, %(dedup_key)s::text, %(on_duplicate)s::text,"
    " %(max_attempts)s::integer, %(priority_step_ms)s::bigint, %(tolerance_ms)s::bigint, %(cost)s::integer)"
)
# The single enqueue before lonnymq_enqueue_v3 (migration 0049 added the cost).
ENQUEUE_V2 = (
    "SELECT lonnymq_enqueue_v2(%(queue)s::text, %(channel)s::text, %(payload)s::jsonb, %(run_at_ms)s::bigint,"
    " %(delay_ms)s::bigint, %(priority)s::integer, %(dedup_key)s::text, %(on_duplicate)s::text,"
    " %(max_attempts)s::integer, %(priority_step_ms)s::bigint, %(tolerance_ms)s::bigint)"
)
# The single enqueue before lonnymq_enqueue_v2 (migration 0025 added the dedup modes).
ENQUEUE_V1 = (
    "SELECT lonnymq_enqueue_v1(%(queue)s::text, %(channel)s::text, %(payload)s::jsonb, %(run_at_ms)s::bigint,"
    " %(delay_ms)s::bigint, %(priority)s::integer, %(dedup_key)s::text, %(max_attempts)s::integer,"
    " %(priority_step_ms)s::bigint, %(tolerance_ms)s::bigint)"
)


def enqueue_singles(conn: psycopg.Connection[Any], n: int) -> float:
    """The app's enqueue statement, or on a base migrated before 0053 (0049, 0025) the one it sent then."""
    has_v4, has_v3, has_v2 = conn.execute(
        "SELECT to_regproc('lonnymq_enqueue_v4') IS NOT NULL, to_regproc('lonnymq_enqueue_v3') IS NOT NULL,"
        " to_regproc('lonnymq_enqueue_v2') IS NOT NULL"
    ).fetchone()
    statement = sql.query("enqueue") if has_v4 else ENQUEUE_V3 if has_v3 else ENQUEUE_V2 if has_v2 else ENQUEUE_V1
    params = {"queue": QUEUE, "payload": core.PAYLOAD_TEXT, "run_at_ms": None, "delay_ms": None, "priority": 0,
              "dedup_key": None, "on_duplicate": "skip", "max_attempts": 5, "priority_step_ms": 1000, "tolerance_ms": 50,
              "cost": 1, "slots": 1}  # fmt: skip
    start = time.perf_counter()
    for i in range(n):
        conn.execute(statement, {**params, "channel": f"c{i % 10}"}, prepare=True)
    return (time.perf_counter() - start) / n


def enqueue_batches(conn: psycopg.Connection[Any], batches: int) -> float:
    channels = [f"b{i}" for i in range(100)]
    start = time.perf_counter()
    for _ in range(batches):
        core.enqueue_many(conn, QUEUE, channels)
    return (time.perf_counter() - start) / batches


WIDE = 2000


def enqueue_wide(conn: psycopg.Connection[Any], calls: int) -> float:
    """``calls`` bulk enqueues of WIDE messages into WIDE channels, each committed: seconds per call."""
    channels = [f"w{i}" for i in range(WIDE)]
    payloads = [core.PAYLOAD_TEXT] * WIDE
    start = time.perf_counter()
    for _ in range(calls):
        core.enqueue_many(conn, QUEUE, channels, payloads)
    return (time.perf_counter() - start) / calls


def backlog(conn: psycopg.Connection[Any], total: int, capped: bool = False) -> None:
    """``total`` messages over 1,000 channels (``capped``: each with a cap of 1,000, so the
    cap's bookkeeping runs and nothing waits for it)."""
    channels = [f"d{i}" for i in range(1000)]
    if capped:
        for name in channels:
            conn.execute(
                "SELECT lonnymq_configure_channel_v3(%s, %s, 1000, false, NULL, NULL, NULL, NULL, NULL, NULL, false)",
                [QUEUE, name],
            )
    core.fill(conn, QUEUE, total, channels)


def drain_calls(conn: psycopg.Connection[Any], total: int) -> int:
    """Lease 100 and ack them until ``total`` are done or none is left: the calls made."""
    calls = done = 0
    while done < total:
        rows = core.dequeue(conn, QUEUE, 100)
        if not rows:
            break
        core.ack(conn, rows)
        done += len(rows)
        calls += 1
    return calls


def drain(conn: psycopg.Connection[Any], total: int, capped: bool = False) -> float:
    """Seconds per dequeue of 100 and its ack, over 1,000 backlogged channels."""
    backlog(conn, total, capped)
    start = time.perf_counter()
    calls = drain_calls(conn, total)
    return (time.perf_counter() - start) / max(calls, 1)


def drain_functions(conn: psycopg.Connection[Any], total: int, capped: bool = False) -> dict[str, float]:
    """The same drain as :func:`drain`, measured per SQL function: seconds of each function's
    own time per dequeue+ack, by name without its version suffix."""
    conn.execute(
        "TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_dead_message, lonnymq_channel, lonnymq_wake"
    )
    backlog(conn, total, capped)
    conn.execute("SET track_functions = 'pl'")
    conn.execute("SELECT pg_stat_reset()")
    calls = drain_calls(conn, total)
    conn.execute("SET track_functions = 'none'")
    conn.execute("SELECT pg_stat_force_next_flush()")  # flushed when the backend next goes idle
    found: dict[str, float] = {}
    for name, self_ms in conn.execute("SELECT funcname, self_time FROM pg_stat_user_functions"):
        key = re.sub(r"_v\d+$", "", name)
        found[key] = found.get(key, 0.0) + self_ms / 1000 / max(calls, 1)
    return found


def backend_cpu(conn: psycopg.Connection[Any]) -> Callable[[], float]:
    """Seconds of CPU the connection's server backend has used so far (utime + stime)."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    tick = os.sysconf("SC_CLK_TCK")

    def used() -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    return used


def one_round(url: str, args: argparse.Namespace) -> dict[str, float]:
    with core.connect(url) as conn:
        if args.cpu:
            # The functions below time themselves with the wall clock; the same work timed on
            # the backend's CPU clock instead: their result scaled by CPU / wall.
            return cpu_round(conn, args)
        if args.functions:
            figures = {}
            for label, capped in (("dequeue+ack 100", False), ("capped", True)):
                for name, seconds in drain_functions(conn, args.drain, capped).items():
                    figures[f"{label}: {name}"] = seconds
            return figures
        conn.execute(
            "TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_dead_message, lonnymq_channel, lonnymq_wake"
        )
        figures = {
            "enqueue 1": enqueue_singles(conn, args.singles),
            "enqueue 100": enqueue_batches(conn, args.batches),
            "enqueue 2,000 channels": enqueue_wide(conn, args.wide),
        }
        conn.execute(
            "TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_dead_message, lonnymq_channel, lonnymq_wake"
        )
        figures["dequeue+ack 100"] = drain(conn, args.drain)
        conn.execute(
            "TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_dead_message, lonnymq_channel, lonnymq_wake"
        )
        figures["same, capped channels"] = drain(conn, args.drain, capped=True)
        conn.execute("VACUUM ANALYZE lonnymq_message, lonnymq_channel, lonnymq_wake")
    return figures


def cpu_round(conn: psycopg.Connection[Any], args: argparse.Namespace) -> dict[str, float]:
    used = backend_cpu(conn)
    conn.execute(
        "TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_dead_message, lonnymq_channel, lonnymq_wake"
    )
    figures = {}
    start = used()
    enqueue_singles(conn, args.singles)
    figures["enqueue 1"] = (used() - start) / args.singles
    start = used()
    enqueue_batches(conn, args.batches)
    figures["enqueue 100"] = (used() - start) / args.batches
    start = used()
    enqueue_wide(conn, args.wide)
    figures["enqueue 2,000 channels"] = (used() - start) / args.wide
    conn.execute(
        "TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_dead_message, lonnymq_channel, lonnymq_wake"
    )
    core.fill(conn, QUEUE, args.drain, [f"d{i}" for i in range(1000)])
    calls, start = 0, used()
    while rows := core.dequeue(conn, QUEUE, 100):
        core.ack(conn, rows)
        calls += 1
    figures["dequeue+ack 100"] = (used() - start) / max(calls, 1)
    conn.execute("VACUUM ANALYZE lonnymq_message, lonnymq_channel, lonnymq_wake")
    return figures


def main(argv: list[str] | None = None) -> None:
    names = migrations()
    parser = argparse.ArgumentParser(prog="python -m bench.sql_ab", description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--base", default=names[-2], choices=names[:-1], help="migration of the baseline SQL")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--singles", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--drain", type=int, default=20_000)
    parser.add_argument("--wide", type=int, default=10, help="bulk enqueues of 2,000 channels per round")
    parser.add_argument(
        "--cpu", action="store_true", help="server backend CPU time per operation, not wall clock"
    )
    parser.add_argument(
        "--functions", action="store_true", help="each SQL function's own time per dequeue+ack of 100"
    )
    args = parser.parse_args(argv)

    base_url, live_url = with_suffix(args.database_url, "base"), with_suffix(args.database_url, "live")
    core.log(f"building {base_url} at {args.base} and {live_url} at {names[-1]}")
    build(base_url, args.base)
    build(live_url, names[-1])
    results: dict[str, dict[str, list[float]]] = {"base": {}, "live": {}}
    ratios: dict[str, list[float]] = {}
    for number in range(args.rounds):
        order: list[tuple[str, str]] = [("base", base_url), ("live", live_url)]
        if number % 2:
            order.reverse()
        got = {label: one_round(url, args) for label, url in order}
        for label in got:
            for op, seconds in got[label].items():
                results[label].setdefault(op, []).append(seconds)
        for op in got["base"].keys() & got["live"].keys():
            if got["base"][op] > 0:
                ratios.setdefault(op, []).append(got["live"][op] / got["base"][op])
        core.log(f"round {number + 1}/{args.rounds} done")

    med: Callable[[list[float]], float] = statistics.median
    clock = "server backend CPU time" if args.cpu else "wall-clock time"
    if args.functions:
        clock = "each SQL function's own time (pg_stat_user_functions)"
    print(f"SQL at {args.base} (base) vs live SQL at {names[-1]}; {clock}, medians of {args.rounds} rounds")
    print(f"machine: {core.machine_facts()}")
    width = max(24, *(len(op) + 2 for op in results["base"].keys() | results["live"].keys()))
    print(f"{'operation':<{width}}{'base (us/op)':>14}{'live (us/op)':>14}{'live/base':>11}")
    ops = list(results["base"]) + [op for op in results["live"] if op not in results["base"]]
    for op in sorted(ops) if args.functions else ops:
        base, live = results["base"].get(op), results["live"].get(op)
        print(
            f"{op:<{width}}{med(base) * 1e6 if base else 0:>14.0f}{med(live) * 1e6 if live else 0:>14.0f}"
            f"{med(ratios[op]) if op in ratios else float('nan'):>11.2f}"
        )


if __name__ == "__main__":
    main()
