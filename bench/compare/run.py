"""The comparison run: django-lonnymq vs pgqueuer vs procrastinate vs a raw SKIP LOCKED table.

One process orchestrates; every system is driven by a small script (``drv_<system>.py``) that
runs in that system's own virtualenv (pgqueuer and procrastinate: ``bench/compare/.venvs``,
created on first use with the latest release from PyPI; raw and lonnymq: the project's
``.venv``). Each system gets its own database on the same PostgreSQL. Every measurement is
repeated (3 runs by default), runs are interleaved across systems, and each figure is also
shown as a ratio to the raw baseline measured in the same run. See
docs/benchmarks-comparison.md for the method and the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENVS = os.path.join(HERE, ".venvs")
RESULTS = os.path.join(HERE, "results")
PROJECT_PY = os.path.join(ROOT, ".venv", "bin", "python")
QUEUE = "bench_noop"

PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
# Database names: <prefix><system>. Another prefix keeps several runs on one server apart.
DB_PREFIX = os.environ.get("BENCH_DB_PREFIX", "lq_cmp_")
SYSTEMS = ["raw", "lonnymq", "pgqueuer", "procrastinate"]
# Columns of the table: the raw baseline twice (one message per transaction, batches of 100).
COLUMNS = ["raw-1", "raw-100", "lonnymq", "pgqueuer", "procrastinate"]
PIP = {
    "pgqueuer": ["pgqueuer", "asyncpg", "psycopg[binary]"],
    "procrastinate": ["procrastinate", "psycopg[binary]"],
}

LOGF = subprocess.DEVNULL  # drivers' stderr while filling; set to the run's log file by Bench

RESET_SQL = {
    "raw": "TRUNCATE raw_queue RESTART IDENTITY",
    "lonnymq": "TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_dead_message, lonnymq_channel, lonnymq_wake "
    "RESTART IDENTITY CASCADE",
    "pgqueuer": "TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics RESTART IDENTITY",
    "procrastinate": "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_workers "
    "RESTART IDENTITY CASCADE",
}
REMAINING_SQL = {
    "raw": "SELECT count(*) FROM raw_queue",
    "lonnymq": "SELECT count(*) FROM lonnymq_message",
    "pgqueuer": "SELECT count(*) FROM pgqueuer",
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
}

# Sizes. Drain sizes differ per system so that each drain lasts roughly a second or more at
# the rates measured here (procrastinate handles ~100-800 messages/s, raw batched ~10-100k/s).
QUICK = {
    "reps": 3,
    "enqueue_single": 200,
    "enqueue_batch": 10_000,
    "enqueue_channels": 10,
    "drain_n": {"raw-1": 300, "raw-100": 10_000, "lonnymq": 3_000, "pgqueuer": 2_000, "procrastinate": 150},
    "drain_workers": [1, 4],
    "drain_channels": [1, 1000],
    "latency_n": 100,
    "backlogs": [1_000, 100_000],
    "backlog_channels": [10, 10_000],
    "dequeue_calls": 5,
    "fair_big": 100_000,
    "fair_reps": 1,
    "memory_n": 30_000,
}
FULL = {
    "reps": 3,
    "enqueue_single": 10_000,
    "enqueue_batch": 100_000,
    "enqueue_channels": 10,
    "drain_n": {
        "raw-1": 10_000,
        "raw-100": 100_000,
        "lonnymq": 50_000,
        "pgqueuer": 30_000,
        "procrastinate": 3_000,
    },
    "drain_workers": [1, 2, 4],
    "drain_channels": [1, 1000],
    "latency_n": 500,
    "backlogs": [1_000, 100_000, 1_000_000],
    "backlog_channels": [10, 10_000],
    "dequeue_calls": 20,
    "fair_big": 100_000,
    "fair_reps": 3,
    "memory_n": 1_000_000,
}

# Worker settings per column: batch size, and concurrency where the system has one.
WORKER = {
    "raw-1": {"system": "raw", "batch": 1, "concurrency": 0},
    "raw-100": {"system": "raw", "batch": 100, "concurrency": 0},
    # 4 handler threads, leasing 100 at a time (the worker keeps a leased batch in a local
    # buffer); with no-op handlers 4 threads beat 100 (3.2k vs 1.9k msg/s, one worker).
    "lonnymq": {"system": "lonnymq", "batch": 100, "concurrency": 4},
    "pgqueuer": {"system": "pgqueuer", "batch": 100, "concurrency": 0},
    "procrastinate": {"system": "procrastinate", "batch": 1, "concurrency": 10},
}
# Other lonnymq worker settings for a run, e.g. BENCH_LONNYMQ_CONCURRENCY=1 BENCH_LONNYMQ_BATCH=1
# (run_queue_worker's defaults) for the latency of an idle worker as a new user starts it.
WORKER["lonnymq"]["concurrency"] = int(
    os.environ.get("BENCH_LONNYMQ_CONCURRENCY", WORKER["lonnymq"]["concurrency"])
)
WORKER["lonnymq"]["batch"] = int(os.environ.get("BENCH_LONNYMQ_BATCH", WORKER["lonnymq"]["batch"]))


ACTIVE: set[str] = set(COLUMNS)  # --columns narrows the run (e.g. to measure a prototype)


def active(*columns: str) -> list[str]:
    return [c for c in columns if c in ACTIVE]


def log(*parts: Any) -> None:
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


def dsn(system: str) -> str:
    return f"{PG}/{DB_PREFIX}{system}"


def python_of(system: str) -> str:
    if system in PIP:
        return os.path.join(VENVS, system, "bin", "python")
    return PROJECT_PY if os.path.exists(PROJECT_PY) else sys.executable


def driver(system: str) -> list[str]:
    return [python_of(system), os.path.join(HERE, f"drv_{system}.py")]


# ---------------------------------------------------------------------------------------
# Set-up
# ---------------------------------------------------------------------------------------


def ensure_venvs() -> dict[str, str]:
    """Create each competitor's virtualenv on first use; return the installed versions."""
    versions = {}
    for system, packages in PIP.items():
        venv = os.path.join(VENVS, system)
        py = os.path.join(venv, "bin", "python")
        stamp = os.path.join(venv, ".bench-installed")
        if not os.path.exists(stamp):
            log(f"creating {venv} and installing {' '.join(packages)} from PyPI")
            subprocess.run(["python3", "-m", "venv", venv], check=True)
            subprocess.run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
            subprocess.run([py, "-m", "pip", "install", "-q", *packages], check=True)
            open(stamp, "w").close()
        versions[system] = subprocess.run(
            [py, "-c", f"import importlib.metadata as m; print(m.version({system!r}))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    versions["lonnymq"] = (
        subprocess.run(
            [
                python_of("lonnymq"),
                "-c",
                "import importlib.metadata as m; print(m.version('django-lonnymq'))",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        ).stdout.strip()
        or "working tree"
    )
    lq_root = os.environ.get("BENCH_LONNYMQ_ROOT") or ROOT
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "django_lonnymq"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout.strip()
    if lq_root == ROOT:
        versions["lonnymq"] += f" @ {head or '?'}{' + local changes' if dirty else ''}"
        prepared = os.environ.get("BENCH_LONNYMQ_PREPARED", "1") != "0"
        versions["lonnymq"] += " (Django prepare_threshold=5)" if prepared else " (nothing prepared)"
        versions["lonnymq"] += f" (worker --concurrency {WORKER['lonnymq']['concurrency']} --batch-size {WORKER['lonnymq']['batch']})"
    else:
        versions["lonnymq"] += f" from {lq_root} (BENCH_LONNYMQ_ROOT)"
    return versions


def ensure_databases() -> None:
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        for system in SYSTEMS:
            conn.execute(f'DROP DATABASE IF EXISTS "{DB_PREFIX}{system}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{DB_PREFIX}{system}"')
    for system in SYSTEMS:
        log(f"installing {system}'s schema into {DB_PREFIX}{system}")
        subprocess.run(
            [*driver(system), "setup", "--dsn", dsn(system)],
            check=True,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }
    try:
        with open("/proc/meminfo") as f:
            info["ram_gb"] = round(int(f.readline().split()[1]) / 1024 / 1024, 1)
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        pass
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        info["postgres"] = conn.execute("SHOW server_version").fetchone()[0]
        for name in ("shared_buffers", "synchronous_commit", "fsync", "max_connections"):
            info[name] = conn.execute(f"SHOW {name}").fetchone()[0]
    info["loadavg_start"] = os.getloadavg()
    return info


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


class Db:
    """One autocommit connection per system database, reopened on demand."""

    def __init__(self) -> None:
        self._conns: dict[str, psycopg.Connection] = {}

    def __call__(self, system: str) -> psycopg.Connection:
        conn = self._conns.get(system)
        if conn is None or conn.closed:
            conn = self._conns[system] = psycopg.connect(dsn(system), autocommit=True)
        return conn

    def reset(self, system: str) -> None:
        self(system).execute(RESET_SQL[system])

    def remaining(self, system: str) -> int:
        return int(self(system).execute(REMAINING_SQL[system]).fetchone()[0])

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()


def payloads(start: int, n: int) -> list[str]:
    pad = "x" * 60
    now = round(time.time(), 6)
    return [
        json.dumps({"t": now, "i": i, "pad": pad}, separators=(",", ":")) for i in range(start, start + n)
    ]


BULK_LONNYMQ = """
WITH ch AS (
    INSERT INTO lonnymq_channel (queue, name, next_dequeue_at, turn)
    SELECT %(queue)s, %(prefix)s || g, lonnymq_now_ms_v1(), nextval('lonnymq_turn_seq') * 100000
      FROM generate_series(0, %(channels)s - 1) g
    ON CONFLICT (queue, name) DO UPDATE
       SET next_dequeue_at = least(coalesce(lonnymq_channel.next_dequeue_at, excluded.next_dequeue_at),
                                   excluded.next_dequeue_at)
    RETURNING id, name
)
INSERT INTO lonnymq_message (channel_id, payload, dequeue_at, max_attempts)
SELECT ch.id, jsonb_build_object('t', extract(epoch FROM clock_timestamp()), 'i', g, 'pad', repeat('x', 60)),
       lonnymq_now_ms_v1(), 5
  FROM generate_series(%(start)s, %(stop)s - 1) g
  JOIN ch ON ch.name = %(prefix)s || (g %% %(channels)s)
 ORDER BY g
"""
BULK_RAW = """
INSERT INTO raw_queue (channel, payload)
SELECT %(prefix)s || (g %% %(channels)s),
       jsonb_build_object('t', extract(epoch FROM clock_timestamp()), 'i', g, 'pad', repeat('x', 60))
  FROM generate_series(%(start)s, %(stop)s - 1) g
 ORDER BY g
"""


def fill(db: Db, system: str, n: int, channels: int, *, prefix: str = "ch") -> None:
    """Load n ready messages over channels ``<prefix>0..`` (untimed).

    raw and lonnymq: one set-based INSERT per 100k rows straight into their tables (for
    lonnymq: the channel rows with next_dequeue_at set, as an enqueue leaves them, then the
    messages), so 1M-message backlogs load in seconds; pgqueuer and procrastinate: their own
    batched enqueue through the driver (1,000 per call).
    """
    if system in ("raw", "lonnymq"):
        conn = db(system)
        sql = BULK_RAW if system == "raw" else BULK_LONNYMQ
        for start in range(0, n, 100_000):
            conn.execute(
                sql,
                {
                    "queue": QUEUE,
                    "prefix": prefix,
                    "channels": channels,
                    "start": start,
                    "stop": min(start + 100_000, n),
                },
            )
        return
    subprocess.run(
        [
            *driver(system),
            "enqueue",
            "--dsn",
            dsn(system),
            "--mode",
            "batch",
            "--n",
            str(n),
            "--channels",
            str(channels),
            "--batch",
            "1000",
        ],
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=LOGF,
    )


def enqueue_small(db: Db, system: str, channel: str, k: int) -> None:
    """k messages into one channel through the system's real enqueue path (SQL function for lonnymq)."""
    conn = db(system)
    body = payloads(0, k)
    if system == "raw":
        conn.execute(
            "INSERT INTO raw_queue (channel, payload) SELECT * FROM unnest(%s::text[], %s::jsonb[])",
            ([channel] * k, body),
        )
    else:
        conn.execute(
            "SELECT lonnymq_enqueue_many_v2(%s, %s::text[], %s::jsonb[])", (QUEUE, [channel] * k, body)
        )


def read_records(out: str) -> list[dict[str, Any]]:
    recs = []
    for name in os.listdir(out):
        if name.startswith("rec-"):
            with open(os.path.join(out, name)) as f:
                recs.append(json.load(f))
    return recs


def spawn_worker(column: str, out: str, channels: int, *, burst: bool, logf, extra_env: dict | None = None):
    w = WORKER[column]
    system = w["system"]
    argv = [
        *driver(system),
        "worker",
        "--dsn",
        dsn(system),
        "--channels",
        str(channels),
        "--batch",
        str(w["batch"]),
    ]
    if w["concurrency"]:
        argv += ["--concurrency", str(w["concurrency"])]
    if burst:
        argv.append("--burst")
    env = dict(os.environ, BENCH_OUT=out, PYTHONUNBUFFERED="1")
    env.update(extra_env or {})
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------------------
# Measurements (each returns one number for one run)
# ---------------------------------------------------------------------------------------


class Bench:
    def __init__(self, cfg: dict[str, Any], workdir: str) -> None:
        self.cfg = cfg
        self.db = Db()
        self.workdir = workdir
        self.logf = open(os.path.join(workdir, "workers.log"), "a")  # noqa: SIM115 (closed with the run)
        global LOGF
        LOGF = self.logf
        self.results: dict[str, dict[str, list[float]]] = {}  # metric -> column -> per-run values
        self.extra: dict[str, Any] = {}

    def record(self, metric: str, column: str, value: float | None) -> None:
        if value is not None:
            self.results.setdefault(metric, {}).setdefault(column, []).append(value)

    # -- enqueue -------------------------------------------------------------------------

    def enqueue(self, column: str, mode: str) -> float:
        system = WORKER[column]["system"]
        n = self.cfg["enqueue_single"] if mode == "single" else self.cfg["enqueue_batch"]
        self.db.reset(system)
        proc = subprocess.run(
            [
                *driver(system),
                "enqueue",
                "--dsn",
                dsn(system),
                "--mode",
                mode,
                "--n",
                str(n),
                "--channels",
                str(self.cfg["enqueue_channels"]),
                "--batch",
                "100",
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        )
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        got = self.db.remaining(system)
        if got != n:
            raise RuntimeError(f"{column} enqueue {mode}: {got} messages in the table, expected {n}")
        self.db.reset(system)
        return n / result["seconds"]

    # -- drain ---------------------------------------------------------------------------

    def drain(self, column: str, workers: int, channels: int) -> tuple[float, float]:
        system = WORKER[column]["system"]
        n = self.cfg["drain_n"][column]
        self.db.reset(system)
        fill(self.db, system, n, channels)
        if system in ("raw", "lonnymq"):
            self.db(system).execute("VACUUM ANALYZE")
        out = tempfile.mkdtemp(dir=self.workdir, prefix=f"drain-{column}-")
        go = os.path.join(out, "go")
        procs = [
            spawn_worker(column, out, channels, burst=True, logf=self.logf, extra_env={"BENCH_GO_FILE": go})
            for _ in range(workers)
        ]
        # Start line: every worker has imported, connected and registered, then all go at once.
        ready_by = time.monotonic() + 120
        while sum(name.startswith("go.ready-") for name in os.listdir(out)) < workers:
            if time.monotonic() > ready_by or any(p.poll() is not None for p in procs):
                for p in procs:
                    stop(p)
                raise RuntimeError(f"{column}: workers did not reach the start line")
            time.sleep(0.01)
        t_go = time.time()
        open(go, "w").close()
        deadline = time.monotonic() + max(120.0, n / 50)
        for proc in procs:
            try:
                proc.wait(max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                log(f"  {column}: worker still running at the deadline; stopping it")
                stop(proc)
        recs = [r for r in read_records(out) if r["count"]]
        left = self.db.remaining(system)
        handled = sum(r["count"] for r in recs)
        if left or handled < n:
            raise RuntimeError(f"{column} drain: {handled} handled of {n}, {left} left in the queue")
        last = max(r["last"] for r in recs)
        peak = max(r["rss_peak_kb"] or 0 for r in recs) / 1024
        self.db.reset(system)
        shutil.rmtree(out, ignore_errors=True)
        # Time to empty: from the start signal to the last handler start.
        return n / max(last - t_go, 1e-6), peak

    # -- latency -------------------------------------------------------------------------

    def latency(self, column: str) -> tuple[float, float]:
        system = WORKER[column]["system"]
        self.db.reset(system)
        out = tempfile.mkdtemp(dir=self.workdir, prefix=f"lat-{column}-")
        ready = os.path.join(out, "ready")
        worker = spawn_worker(
            column, out, 1, burst=False, logf=self.logf, extra_env={"BENCH_READY_FILE": ready}
        )
        try:
            subprocess.run(
                [
                    *driver(system),
                    "produce",
                    "--dsn",
                    dsn(system),
                    "--n",
                    str(self.cfg["latency_n"]),
                    "--interval",
                    "0.01",
                    "--ready-file",
                    ready,
                    "--channels",
                    "1",
                ],
                cwd=ROOT,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=self.logf,
                timeout=300,
            )
            deadline = time.monotonic() + 30
            while self.db.remaining(system) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)
        finally:
            stop(worker)
        recs = read_records(out)
        lat = sorted(x for r in recs for x in r["latencies_ms"])
        if len(lat) < self.cfg["latency_n"]:
            raise RuntimeError(
                f"{column} latency: {len(lat)} of {self.cfg['latency_n']} measured messages seen"
            )
        self.db.reset(system)
        shutil.rmtree(out, ignore_errors=True)
        return percentile(lat, 50), percentile(lat, 99)

    # -- dequeue cost (lonnymq and raw, in-process SQL) ----------------------------------

    def dequeue_cost(self, system: str, calls: int) -> float:
        """Median ms of one dequeue of 100 (statement + commit, synchronous_commit off so the
        figure is the statement's cost, not the disk's), each followed by an untimed ack."""
        conn = self.db(system)
        conn.execute("SET synchronous_commit = off")
        times = []
        try:
            for _ in range(calls):
                t0 = time.perf_counter()
                if system == "lonnymq":
                    rows = conn.execute(
                        "SELECT id, lease_token FROM lonnymq_dequeue_v1(%s, %s, %s, %s, %s)",
                        (QUEUE, 100, 30000, "bench", 50),
                        prepare=True,
                    ).fetchall()
                    times.append(time.perf_counter() - t0)
                    conn.execute(
                        "SELECT lonnymq_ack_v1(%s::bigint[], %s::uuid[])",
                        ([r[0] for r in rows], [r[1] for r in rows]),
                        prepare=True,
                    )
                else:
                    rows = conn.execute(
                        "DELETE FROM raw_queue WHERE id IN (SELECT id FROM raw_queue ORDER BY id LIMIT %s "
                        "FOR UPDATE SKIP LOCKED) RETURNING id, payload",
                        (100,),
                        prepare=True,
                    ).fetchall()
                    times.append(time.perf_counter() - t0)
                if len(rows) != 100:
                    raise RuntimeError(f"{system} dequeue returned {len(rows)} rows, expected 100")
        finally:
            conn.execute("SET synchronous_commit = on")
        return statistics.median(times) * 1000

    # -- fairness ------------------------------------------------------------------------

    def fairness(self, batch: int) -> int:
        """lonnymq: 1 tenant with fair_big ready messages, then 10 tenants with 10 each.
        Release batches until every small-tenant message is out; position of the last one."""
        db = self.db
        db.reset("lonnymq")
        fill(db, "lonnymq", self.cfg["fair_big"], 1, prefix="big")
        for t in range(10):
            enqueue_small(db, "lonnymq", f"small{t}", 10)
        db("lonnymq").execute("ANALYZE")
        conn = db("lonnymq")
        conn.execute("SET synchronous_commit = off")
        released = 0
        small_seen = 0
        last_pos = None
        while small_seen < 100:
            rows = conn.execute(
                "SELECT id, channel, lease_token FROM lonnymq_dequeue_v1(%s, %s, %s, %s, %s)",
                (QUEUE, batch, 30000, "bench", 50),
                prepare=True,
            ).fetchall()
            if not rows:
                raise RuntimeError("fairness: queue ran dry before the small tenants were served")
            for _id, channel, _tok in rows:
                released += 1
                if channel.startswith("small"):
                    small_seen += 1
                    last_pos = released
            conn.execute(
                "SELECT lonnymq_ack_v1(%s::bigint[], %s::uuid[])",
                ([r[0] for r in rows], [r[2] for r in rows]),
                prepare=True,
            )
        conn.execute("SET synchronous_commit = on")
        db.reset("lonnymq")
        return int(last_pos)

    def fairness_raw(self) -> int:
        """Raw FIFO for contrast: the same arrivals; position = messages ahead of the last small one + 1."""
        db = self.db
        db.reset("raw")
        fill(db, "raw", self.cfg["fair_big"], 1, prefix="big")
        for t in range(10):
            enqueue_small(db, "raw", f"small{t}", 10)
        pos = (
            db("raw")
            .execute(
                "SELECT count(*) FROM raw_queue WHERE id <= (SELECT max(id) FROM raw_queue WHERE channel LIKE 'small%')"
            )
            .fetchone()[0]
        )
        db.reset("raw")
        return int(pos)

    # -- memory --------------------------------------------------------------------------

    def memory(self) -> tuple[float, float, float]:
        n = self.cfg["memory_n"]
        self.db.reset("lonnymq")
        log(f"  memory: filling lonnymq with {n} messages over 1000 channels")
        fill(self.db, "lonnymq", n, 1000)
        self.db("lonnymq").execute("VACUUM ANALYZE")
        out = tempfile.mkdtemp(dir=self.workdir, prefix="mem-")
        proc = spawn_worker(
            "lonnymq", out, 1000, burst=True, logf=self.logf, extra_env={"BENCH_RSS_AT": "10000"}
        )
        samples = []
        while proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            samples.append(int(line.split()[1]))
            except OSError:
                pass
            time.sleep(0.5)
        recs = read_records(out)
        rec = recs[0]
        if rec["count"] < n:
            raise RuntimeError(f"memory: worker handled {rec['count']} of {n}")
        rate = rec["count"] / max(rec["last"] - rec["first"], 1e-6)
        # VmHWM is updated lazily by the kernel: take the largest of it, the RSS read at 10k
        # and the RSS sampled from outside every 0.5 s.
        peak_kb = max(rec["rss_peak_kb"] or 0, rec["rss_at_n"] or 0, max(samples, default=0))
        self.extra["memory_samples_kb"] = samples
        self.db.reset("lonnymq")
        shutil.rmtree(out, ignore_errors=True)
        return rec["rss_at_n"] / 1024, peak_kb / 1024, rate


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    k = (len(sorted_values) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


# ---------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------


@dataclass
class Row:
    metric: str
    label: str
    unit: str
    baseline: str | None  # column whose same-run value is the ratio's denominator
    kind: str = "rate"  # rate | ms | int | mb
    columns: list[str] = field(default_factory=lambda: list(COLUMNS))


def run_all(cfg: dict[str, Any], only: set[str] | None, workdir: str) -> tuple[Bench, list[Row]]:
    b = Bench(cfg, workdir)
    rows: list[Row] = []

    def want(section: str) -> bool:
        return only is None or section in only

    reps = cfg["reps"]

    if want("enqueue"):
        rows.append(
            Row(
                "enq1",
                f"enqueue, 1 msg/txn ({cfg['enqueue_single']:,})",
                "msg/s",
                "raw-1",
                columns=["raw-1", "lonnymq", "pgqueuer", "procrastinate"],
            )
        )
        rows.append(
            Row(
                "enq100",
                f"enqueue, 100 msg/txn ({cfg['enqueue_batch']:,})",
                "msg/s",
                "raw-100",
                columns=["raw-100", "lonnymq", "pgqueuer", "procrastinate"],
            )
        )
    if want("drain"):
        for ch in cfg["drain_channels"]:
            for w in cfg["drain_workers"]:
                rows.append(
                    Row(
                        f"drain-{ch}-{w}",
                        f"drain, {ch:,} ch, {w} worker{'s' if w > 1 else ''}",
                        "msg/s",
                        "raw-100",
                    )
                )
    if want("latency"):
        rows.append(
            Row(
                "lat50",
                f"latency p50 ({cfg['latency_n']} msgs, 10 ms apart)",
                "ms",
                "raw-1",
                "ms",
                columns=["raw-1", "lonnymq", "pgqueuer", "procrastinate"],
            )
        )
        rows.append(
            Row(
                "lat99",
                "latency p99",
                "ms",
                "raw-1",
                "ms",
                columns=["raw-1", "lonnymq", "pgqueuer", "procrastinate"],
            )
        )
    if want("dequeue"):
        for backlog in cfg["backlogs"]:
            for ch in cfg["backlog_channels"]:
                rows.append(
                    Row(
                        f"deq-{backlog}-{ch}",
                        f"dequeue 100, backlog {backlog:,} / {ch:,} ch",
                        "ms/call",
                        "raw-100",
                        "ms",
                        columns=["raw-100", "lonnymq"],
                    )
                )

    for rep in range(reps):
        log(f"== run {rep + 1} of {reps}")
        if want("enqueue"):
            for column in active("raw-1", "lonnymq", "pgqueuer", "procrastinate"):
                v = b.enqueue(column, "single")
                b.record("enq1", column, v)
                log(f"  enqueue 1/txn     {column:14} {v:10.0f} msg/s")
            for column in active("raw-100", "lonnymq", "pgqueuer", "procrastinate"):
                v = b.enqueue(column, "batch")
                b.record("enq100", column, v)
                log(f"  enqueue 100/txn   {column:14} {v:10.0f} msg/s")
        if want("drain"):
            for ch in cfg["drain_channels"]:
                for w in cfg["drain_workers"]:
                    for column in active(*COLUMNS):
                        rate, peak = b.drain(column, w, ch)
                        b.record(f"drain-{ch}-{w}", column, rate)
                        b.record("drain-peak-rss", column, peak)
                        log(
                            f"  drain {ch:5} ch {w} w {column:14} {rate:10.0f} msg/s  (peak RSS {peak:.0f} MB)"
                        )
        if want("latency"):
            for column in active("raw-1", "lonnymq", "pgqueuer", "procrastinate"):
                p50, p99 = b.latency(column)
                b.record("lat50", column, p50)
                b.record("lat99", column, p99)
                log(f"  latency {column:14} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms")

    if want("dequeue"):
        calls = cfg["dequeue_calls"]
        for backlog in cfg["backlogs"]:
            for ch in cfg["backlog_channels"]:
                metric = f"deq-{backlog}-{ch}"
                for system in ("raw", "lonnymq"):
                    b.db.reset(system)
                    log(f"  dequeue cost: filling {system} with {backlog:,} over {ch:,} channels")
                    fill(b.db, system, backlog, ch)
                    b.db(system).execute("VACUUM ANALYZE")
                for _rep in range(reps):
                    for system, column in (("raw", "raw-100"), ("lonnymq", "lonnymq")):
                        k = (
                            calls
                            if backlog >= 100 * calls * reps * 5
                            else max(1, backlog // (100 * reps * 2))
                        )
                        v = b.dequeue_cost(system, k)
                        b.record(metric, column, v)
                        log(f"  dequeue cost {backlog:>9,} / {ch:>6,} ch {column:8} {v:7.2f} ms/call (x{k})")
                for system in ("raw", "lonnymq"):
                    b.db.reset(system)

    if want("fairness"):
        rows.append(
            Row(
                "fair1",
                f"fairness: last small msg, batch 1 ({cfg['fair_big']:,} big)",
                "position",
                None,
                "int",
                columns=["raw-1", "lonnymq"],
            )
        )
        rows.append(
            Row(
                "fair100",
                "fairness: last small msg, batch 100",
                "position",
                None,
                "int",
                columns=["raw-100", "lonnymq"],
            )
        )
        fifo = b.fairness_raw()
        for _rep in range(cfg["fair_reps"]):
            for batch, metric, rawcol in ((1, "fair1", "raw-1"), (100, "fair100", "raw-100")):
                pos = b.fairness(batch)
                b.record(metric, "lonnymq", pos)
                b.record(metric, rawcol, fifo)
                log(f"  fairness batch {batch:3}: last small-tenant message at {pos} (raw FIFO: {fifo})")

    if want("memory"):
        rss10k, peak, rate = b.memory()
        b.extra["memory"] = {"rss_after_10k_mb": rss10k, "peak_mb": peak, "n": cfg["memory_n"], "rate": rate}
        rows.append(
            Row("mem10k", "worker RSS after 10k msgs", "MB", None, "mb", columns=["raw-100", "lonnymq"])
        )
        rows.append(
            Row(
                "mempeak",
                f"worker peak RSS, {cfg['memory_n']:,} msgs",
                "MB",
                None,
                "mb",
                columns=["raw-100", "lonnymq"],
            )
        )
        b.record("mem10k", "lonnymq", rss10k)
        b.record("mempeak", "lonnymq", peak)
        if "drain-peak-rss" in b.results and "raw-100" in b.results["drain-peak-rss"]:
            b.record("mempeak", "raw-100", max(b.results["drain-peak-rss"]["raw-100"]))
        log(
            f"  memory: RSS after 10k {rss10k:.1f} MB, peak {peak:.1f} MB ({peak / rss10k:.2f}x), "
            f"drain rate {rate:.0f}/s"
        )
    return b, rows


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------


def fmt(value: float, kind: str) -> str:
    if kind == "rate":
        return f"{value / 1000:.1f}k" if value >= 1000 else f"{value:.0f}"
    if kind == "ms":
        return f"{value:.2f}" if value < 100 else f"{value:.0f}"
    if kind == "mb":
        return f"{value:.0f}"
    return f"{value:,.0f}"


def cell(b: Bench, row: Row, column: str) -> str:
    values = b.results.get(row.metric, {}).get(column)
    if not values:
        return "—"
    med = statistics.median(values)
    text = fmt(med, row.kind)
    if len(values) > 1 and max(values) != min(values):
        text += f" ({fmt(min(values), row.kind)}–{fmt(max(values), row.kind)})"
    if row.baseline and column != row.baseline:
        base = b.results.get(row.metric, {}).get(row.baseline)
        if base and len(base) == len(values):
            ratios = [v / r for v, r in zip(values, base, strict=True) if r]
            text += f" ×{statistics.median(ratios):.2f}"
    return text


def table(b: Bench, rows: list[Row]) -> str:
    header = ["measure", "unit", *COLUMNS]
    body = [[r.label, r.unit, *[cell(b, r, c) if c in r.columns else "" for c in COLUMNS]] for r in rows]
    widths = [max(len(x[i]) for x in [header, *body]) for i in range(len(header))]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"  # noqa: E731
    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(x) for x in body]
    return "\n".join(out)


def med(b: Bench, metric: str, column: str) -> float | None:
    values = b.results.get(metric, {}).get(column)
    return statistics.median(values) if values else None


def med_ratio(b: Bench, metric: str, column: str, base: str) -> float | None:
    a = b.results.get(metric, {}).get(column)
    r = b.results.get(metric, {}).get(base)
    if not a or not r or len(a) != len(r):
        return None
    return statistics.median([x / y for x, y in zip(a, r, strict=True)])


def targets(b: Bench, cfg: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """Issue 7's targets, each as (target, measured, met); those whose figures are missing
    (a partial run with --only/--columns) are left out."""
    try:
        return _targets(b, cfg)
    except (TypeError, KeyError, ZeroDivisionError):
        return []


def _targets(b: Bench, cfg: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    out: list[tuple[str, str, bool | None]] = []

    def add(name: str, measured: str, ok: bool | None) -> None:
        out.append((name, measured, ok))

    d4 = "drain-1000-4"
    if d4 in b.results:
        r_pgq = med_ratio(b, d4, "lonnymq", "pgqueuer")
        r_raw = med_ratio(b, d4, "lonnymq", "raw-100")
        if r_pgq is not None:
            add("drain 1,000 ch, 4 workers ≥ 2x pgqueuer", f"{r_pgq:.2f}x", r_pgq >= 2)
        if r_raw is not None:
            add("drain 1,000 ch, 4 workers ≥ 0.15x raw batched", f"{r_raw:.2f}x", r_raw >= 0.15)
        one = "drain-1-4"
        if one in b.results:
            r = med_ratio(b, one, "lonnymq", "raw-100")
            x = med(b, one, "lonnymq") / med(b, d4, "lonnymq")
            add("1 ch, 4 workers ≥ 0.5x the 1,000-ch figure", f"{x:.2f}x", x >= 0.5)
            del r
            w = [med(b, f"drain-1-{n}", "lonnymq") for n in cfg["drain_workers"]]
            mono = all(w[i + 1] >= w[i] * 0.95 for i in range(len(w) - 1))
            add(
                "1 ch: more workers never slower (5% noise allowed)",
                " / ".join(f"{fmt(x, 'rate')}" for x in w),
                mono,
            )
    if "enq1" in b.results:
        r = med_ratio(b, "enq1", "lonnymq", "raw-1")
        add("enqueue 1/txn ≥ 0.9x raw", f"{r:.2f}x", r >= 0.9)
    if "enq100" in b.results:
        r = med_ratio(b, "enq100", "lonnymq", "raw-100")
        add("enqueue batched ≥ 0.7x raw batched", f"{r:.2f}x", r >= 0.7)
    if "lat50" in b.results:
        for metric, name in (("lat50", "p50"), ("lat99", "p99")):
            best = min(med(b, metric, "pgqueuer"), med(b, metric, "procrastinate"))
            ours = med(b, metric, "lonnymq")
            add(
                f"latency {name} ≤ best of pgqueuer/procrastinate",
                f"{ours:.2f} vs {best:.2f} ms",
                ours <= best,
            )
    if any(k.startswith("deq-") for k in b.results):
        big = max(cfg["backlogs"])
        chs = max(cfg["backlog_channels"])
        hi = med(b, f"deq-{big}-{chs}", "lonnymq")
        lo = med(b, f"deq-{min(cfg['backlogs'])}-{chs}", "lonnymq")
        if hi and lo:
            add(
                f"dequeue cost at {big:,}/{chs:,} ch ≤ 1.5x at {min(cfg['backlogs']):,}",
                f"{hi / lo:.2f}x ({hi:.2f} vs {lo:.2f} ms)",
                hi / lo <= 1.5,
            )
    if "fair1" in b.results:
        p1 = max(b.results["fair1"]["lonnymq"])
        p100 = max(b.results["fair100"]["lonnymq"])
        add("fairness batch 1 ≤ 111", str(p1), p1 <= 111)
        add("fairness batch 100 ≤ 211", str(p100), p100 <= 211)
    if "memory" in b.extra:
        m = b.extra["memory"]
        x = m["peak_mb"] / m["rss_after_10k_mb"]
        add(
            f"worker RSS after {m['n']:,} ≤ 1.2x after 10k, < 150 MB",
            f"{x:.2f}x, peak {m['peak_mb']:.0f} MB",
            x <= 1.2 and m["peak_mb"] < 150,
        )
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes; under 5 minutes")
    ap.add_argument(
        "--only",
        action="append",
        help="enqueue, drain, latency, dequeue, fairness, memory (repeatable; default all)",
    )
    ap.add_argument("--reps", type=int, default=None, help="runs per measurement (default 3)")
    ap.add_argument("--no-setup", action="store_true", help="reuse the databases of a previous run")
    ap.add_argument("--columns", help=f"comma-separated subset of {','.join(COLUMNS)} (default all)")
    args = ap.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    if args.reps:
        cfg["reps"] = args.reps
    if args.columns:
        ACTIVE.clear()
        ACTIVE.update(c.strip() for c in args.columns.split(","))
    started = time.monotonic()
    os.makedirs(RESULTS, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="lq-compare-")
    versions = ensure_venvs()
    info = machine_info()
    if not args.no_setup:
        ensure_databases()
    log(f"versions: {versions}; machine: {info}")
    b, rows = run_all(cfg, set(args.only) if args.only else None, workdir)
    info["loadavg_end"] = os.getloadavg()
    elapsed = time.monotonic() - started
    text = table(b, rows)
    checks = targets(b, cfg)
    mode = "quick" if args.quick else "full"
    summary = [
        f"django-lonnymq comparison ({mode} mode, {cfg['reps']} runs, median (min–max) ×ratio to the raw "
        f"baseline of the same run; {elapsed / 60:.1f} min)",
        f"versions: {', '.join(f'{k} {v}' for k, v in versions.items())}; PostgreSQL {info['postgres']}; "
        f"{info['nproc']} CPUs, {info.get('ram_gb')} GB RAM; load average at start "
        f"{info['loadavg_start'][0]:.1f}, at end {info['loadavg_end'][0]:.1f}",
        "",
        text,
        "",
        "Targets of issue 7:",
        *[
            f"  [{'met' if ok else 'MISSED' if ok is not None else '?'}] {name}: {measured}"
            for name, measured, ok in checks
        ],
    ]
    report = "\n".join(summary)
    print(report)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with open(os.path.join(RESULTS, f"{stamp}-{mode}.json"), "w") as f:
        json.dump(
            {
                "mode": mode,
                "cfg": cfg,
                "versions": versions,
                "machine": info,
                "elapsed_s": elapsed,
                "results": b.results,
                "extra": b.extra,
                "targets": [{"target": n, "measured": m, "met": ok} for n, m, ok in checks],
            },
            f,
            indent=1,
        )
    with open(os.path.join(RESULTS, f"{stamp}-{mode}.txt"), "w") as f:
        f.write(report + "\n")
    b.db.close()
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
