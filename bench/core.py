"""What the benchmarks share: their database, the payload, worker processes, the plain queue."""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench"

# About 100 bytes of JSON, the same for the queue and the plain table.
PAYLOAD = {
    "tenant": "t-0042",
    "kind": "transcode",
    "video": 1234567,
    "params": {"w": 1280, "h": 720, "fmt": "mp4"},
    "pad": "x" * 16,
}
PAYLOAD_TEXT = json.dumps(PAYLOAD, separators=(",", ":"))

PLAIN_TABLE = """
CREATE TABLE IF NOT EXISTS bench_plain (
    id      bigserial PRIMARY KEY,
    payload jsonb NOT NULL
);
"""
PLAIN_DEQUEUE = """
DELETE FROM bench_plain WHERE id IN (
    SELECT id FROM bench_plain ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
) RETURNING id, payload
"""


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def database_url(arg: str | None = None) -> str:
    return arg or os.environ.get("LONNYMQ_BENCH_DATABASE_URL") or DEFAULT_URL


def dsn(url: str) -> str:
    """libpq accepts postgres:// URLs as they are."""
    return url


def recreate_database(url: str) -> None:
    """Drop and create the bench database, migrate it, add the plain queue table."""
    params = conninfo.conninfo_to_dict(url)
    name = params.get("dbname")
    if not name or name in ("postgres", "template0", "template1"):
        raise SystemExit(f"refusing to recreate database {name!r}: give the bench its own database")
    admin = {**params, "dbname": "postgres"}
    with psycopg.connect(**admin, autocommit=True) as conn:  # type: ignore[arg-type]
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0", "--skip-checks"],
        cwd=ROOT,
        env=worker_env(url),
        check=True,
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PLAIN_TABLE)


def connect(url: str, autocommit: bool = True) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=autocommit, application_name="lonnymq-bench")


def reset(conn: psycopg.Connection[Any]) -> None:
    """Empty every queue table and the plain table (no bloat carried from one test to the next)."""
    conn.execute(
        "TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_dead_message, lonnymq_channel, lonnymq_wake, bench_plain"
        " RESTART IDENTITY"
    )
    if conn.execute("SELECT to_regclass('lonnymq_release_count')").fetchone()[0]:  # since migration 0007
        conn.execute("TRUNCATE lonnymq_release_count")
    if conn.execute("SELECT to_regclass('lonnymq_eligible_mark')").fetchone()[0]:  # since migration 0061
        conn.execute("TRUNCATE lonnymq_eligible_mark")
    if conn.execute("SELECT to_regclass('lonnymq_ready_mark')").fetchone()[0]:  # since migration 0062
        conn.execute("TRUNCATE lonnymq_ready_mark")


def worker_env(url: str, root: Path = ROOT, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=url,
        DJANGO_SETTINGS_MODULE="bench.settings",
        PYTHONPATH=str(root),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


class Proc:
    """A child process whose merged output is collected by a reader thread."""

    def __init__(self, args: Sequence[str], env: dict[str, str], cwd: Path = ROOT) -> None:
        self.popen = subprocess.Popen(
            list(args), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.append(line.rstrip())

    def wait_for(self, pattern: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            if any(regex.search(line) for line in self.lines):
                return
            if self.popen.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"process never said {pattern!r}; output:\n" + "\n".join(self.lines[-20:]))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        code = self.popen.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def wait(self, timeout: float = 120) -> int:
        code = self.popen.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code


def start_worker(url: str, queue: str, *args: str, root: Path = ROOT, **env: str) -> Proc:
    """A ``run_queue_worker`` process; ``root``: the source tree it runs (another checkout
    for an A/B of the worker's own code)."""
    return Proc(
        [sys.executable, str(root / "manage.py"), "run_queue_worker", "--queue", queue, *args],
        worker_env(url, root, **env),
        cwd=root,
    )


def worker_stats(proc: Proc) -> dict[str, float]:
    """The counters a worker prints when it stops (fetched=, acked=, empty_fetches=, ...)."""
    for line in reversed(proc.lines):
        if " stopped: " in line:
            return {
                k: float(v.rstrip("s/"))
                for k, v in re.findall(r"(\w+)=([\d.]+)", line.split(" stopped: ", 1)[1])
            }
    return {}


def start_plain_worker(url: str, mode: str, *args: str, **env: str) -> Proc:
    return Proc(
        [sys.executable, "-m", "bench.plain_worker", mode, "--url", url, *args], worker_env(url, **env)
    )


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, int(round(p / 100 * (len(ordered) - 1)))))
    return ordered[k]


# The bulk enqueue of each database a bench talks to: the app's (lonnymq_enqueue_many_v4), or
# on a database migrated before 0049 (0025) (bench.sql_ab's base) the one the app called then.
_ENQUEUE_MANY: weakref.WeakKeyDictionary[psycopg.Connection[Any], str] = weakref.WeakKeyDictionary()


def enqueue_many_function(conn: psycopg.Connection[Any]) -> str:
    """``lonnymq_enqueue_many_v4``, or the newest the database has (``_v3``, ``_v2``, ``_v1``)."""
    name = _ENQUEUE_MANY.get(conn)
    if name is None:
        row = conn.execute(
            "SELECT to_regproc('lonnymq_enqueue_many_v4') IS NOT NULL, to_regproc('lonnymq_enqueue_many_v3') IS NOT NULL,"
            " to_regproc('lonnymq_enqueue_many_v2') IS NOT NULL"
        ).fetchone()
        assert row is not None
        name = _ENQUEUE_MANY[conn] = next(
            (f"lonnymq_enqueue_many_v{v}" for v, present in zip((4, 3, 2), row, strict=True) if present),
            "lonnymq_enqueue_many_v1",
        )
    return name


def enqueue_many(
    conn: psycopg.Connection[Any], queue: str, channels: Sequence[str], payloads: Sequence[str] | None = None
) -> list[int]:
    """The app's bulk enqueue (its defaults: 5 attempts, no delay, no keys), one call."""
    payloads = payloads or [PAYLOAD_TEXT] * len(channels)
    row = conn.execute(
        f"SELECT {enqueue_many_function(conn)}(%s, %s::text[], %s::jsonb[])",
        [queue, list(channels), list(payloads)],
        prepare=True,
    ).fetchone()
    assert row is not None
    return list(row[0])


def fill(
    conn: psycopg.Connection[Any], queue: str, total: int, channels: Sequence[str], chunk: int = 10_000
) -> None:
    """``total`` messages round robin over ``channels``, in chunks, each chunk committed."""
    for start in range(0, total, chunk):
        n = min(chunk, total - start)
        enqueue_many(conn, queue, [channels[(start + i) % len(channels)] for i in range(n)])


def fill_plain(conn: psycopg.Connection[Any], total: int, chunk: int = 10_000) -> None:
    for start in range(0, total, chunk):
        n = min(chunk, total - start)
        conn.execute(
            "INSERT INTO bench_plain (payload) SELECT p FROM unnest(%s::jsonb[]) AS u(p)",
            [[PAYLOAD_TEXT] * n],
            prepare=True,
        )


def dequeue(
    conn: psycopg.Connection[Any], queue: str, batch: int, lease_ms: int = 600_000
) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT id, channel, lease_token FROM lonnymq_dequeue_v1(%s, %s, %s, 'bench')",
        [queue, batch, lease_ms],
        prepare=True,
    ).fetchall()


def ack(conn: psycopg.Connection[Any], rows: Sequence[tuple[Any, ...]]) -> None:
    if rows:
        conn.execute(
            "SELECT lonnymq_ack_v1(%s::bigint[], %s::uuid[])",
            [[r[0] for r in rows], [r[2] for r in rows]],
            prepare=True,
        )


def count_messages(conn: psycopg.Connection[Any], up_to: int | None = None) -> int:
    """Rows in the message table; with ``up_to``, counted only that far (see _count)."""
    return _count(conn, "lonnymq_message", up_to)


def count_plain(conn: psycopg.Connection[Any], up_to: int | None = None) -> int:
    return _count(conn, "bench_plain", up_to)


def _count(conn: psycopg.Connection[Any], table: str, up_to: int | None) -> int:
    """``up_to`` is for a drain's poller: it walks the primary key and stops after that many
    rows, where a count(*) of 100,000 rows (3-4 ms) every 5 ms takes a fifth of this 2-core
    machine away from the drain it times."""
    if up_to is None:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # type: ignore[index]
    query = f"SELECT count(*) FROM (SELECT 1 FROM {table} ORDER BY id LIMIT %s) AS head"
    return int(conn.execute(query, [up_to], prepare=True).fetchone()[0])  # type: ignore[index]


def server_facts(conn: psycopg.Connection[Any]) -> dict[str, str]:
    facts = {"postgres": str(conn.execute("SHOW server_version").fetchone()[0])}  # type: ignore[index]
    for name in ("shared_buffers", "max_connections", "synchronous_commit", "fsync"):
        facts[name] = str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
    return facts


def machine_facts() -> dict[str, str]:
    facts = {"cpus": str(os.cpu_count())}
    try:
        meminfo = Path("/proc/meminfo").read_text()
        kb = int(re.search(r"MemTotal:\s+(\d+)", meminfo)[1])  # type: ignore[index]
        facts["memory"] = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, TypeError):
        pass
    try:
        load = os.getloadavg()
        facts["load"] = f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    except OSError:
        pass
    return facts
