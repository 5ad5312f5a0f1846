#!/usr/bin/env python
"""The fairness demo that ``make demo`` runs: one big tenant, several small ones, real workers.

1. Creates the database named by ``DATABASE_URL`` if it does not exist, and migrates it.
2. Resets the demo: deletes everything of queue ``transcode`` (messages, dead letters, dedup
   keys, channels) and the scoreboard table ``tenants_jobrun``. Other queues are untouched.
3. Gives one small tenant a concurrency limit, one a bursty rate limit ("4 / s, burst 5"), and
   the ``premium`` tenant weight 3 (``configure_channel``).
4. Enqueues ``bigcorp``'s large backlog first, then ``premium``'s, then a few jobs for each
   small tenant. While both have a backlog, premium gets three releases to bigcorp's one.
5. Starts worker subprocesses (``manage.py run_queue_worker --burst``), prints each tenant's
   progress every second, then a summary.
6. The Spark step (example_project/spark_demo.py; ``--no-spark`` skips it): writes a skewed
   data set with Spark (1,000 tenants, one holding half the rows), exports it into queue
   ``ingest`` with ``django_lonnymq.spark.export()``, exports it again (which must enqueue
   nothing), lets burst workers drain it and shows that the 999 small tenants did not wait
   for the big one.
7. The workflow step (example_project/workflows_demo.py): one workflow per tenant, fetch ->
   3 parse -> merge, each started in its own transaction; a burst worker runs them and the
   step checks every workflow succeeded, each step ran once, each merge saw all its parts.
8. The durable step (example_project/durable_demo.py): one durable handler per tenant on a
   single worker thread: a step, a one-second sleep and a wait for the tenant's approval event,
   none holding the thread; the demo emits the approvals and checks each step ran once.
9. A verdict over all parts. Exits non-zero if anything is off.

"Done" counts come from ``tenants_jobrun``, which the handler writes after a job's work and
before the worker acks it; at the end the demo also checks that no message is left in the
queue, none died, each job ran once, and ``django_lonnymq.api.check()`` finds no problem.

    python example_project/demo.py [--big 3000] [--premium 300] [--small 8] [--small-jobs 15] [--workers 2]
                                   [--no-spark] [--spark-rows 20000]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/lonnymq_demo")

QUEUE = "transcode"
REPORTS = "reports"  # the periodic report (tenants/handlers.py: @periodic every 2 s)
BIG = "bigcorp"
SMALL_NAMES = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka"]
PREMIUM = "premium"  # weight 3: three releases per round to bigcorp's one
PREMIUM_WEIGHT = 3
CAPPED = "acme"  # max_concurrency=1
RATE_LIMITED = "globex"  # a token bucket: RATE
RATE = "4 / s, burst 5"


@dataclass
class Tenant:
    name: str
    jobs: list[float]
    limit: str = "-"

    @property
    def work(self) -> float:
        return sum(self.jobs)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", type=int, default=3000, help="jobs of the big tenant (default 3000)")
    parser.add_argument(
        "--premium", type=int, default=300, help="jobs of the weight-3 premium tenant (default 300; 0: none)"
    )
    parser.add_argument("--small", type=int, default=8, help="number of small tenants (default 8)")
    parser.add_argument("--small-jobs", type=int, default=15, help="jobs per small tenant (default 15)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--concurrency", type=int, default=4, help="handler threads per worker (default 4)")
    parser.add_argument("--batch-size", type=int, default=10, help="messages leased per fetch (default 10)")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the job sizes (default 7)")
    parser.add_argument(
        "--timeout", type=float, default=300, help="give up after this many seconds (default 300)"
    )
    parser.add_argument(
        "--no-spark",
        dest="spark",
        action="store_false",
        help="skip the Spark step (example_project/spark_demo.py)",
    )
    # --spark asked for the Spark step when it was optional; it is the default now.
    parser.add_argument("--spark", action="store_true", default=True, help=argparse.SUPPRESS)
    parser.add_argument(
        "--spark-rows", type=int, default=20_000, help="rows of the Spark step's data set (default 20000)"
    )
    args = parser.parse_args()
    if args.spark_rows < 2:
        parser.error("--spark-rows must be at least 2")
    for name in ("big", "small", "small_jobs", "workers", "concurrency", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def job_sizes(count: int, rng: random.Random) -> list[float]:
    """Jobs of very different sizes: mostly thumbnails, some clips, a few long films."""
    sizes = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.70:
            sizes.append(round(rng.uniform(0.005, 0.015), 3))  # thumbnail
        elif roll < 0.95:
            sizes.append(round(rng.uniform(0.05, 0.10), 3))  # clip
        else:
            sizes.append(round(rng.uniform(0.5, 1.0), 3))  # film
    return sizes


# ---------------------------------------------------------------------------------------
# Set-up: database, migrations, reset
# ---------------------------------------------------------------------------------------


def ensure_database() -> str:
    """Create the database of DATABASE_URL when missing; returns a printable description."""
    import environ
    import psycopg
    from psycopg import sql

    url = os.environ["DATABASE_URL"]
    config = environ.Env.db_url_config(url)
    params = {
        "user": config.get("USER") or None,
        "password": config.get("PASSWORD") or None,
        "host": config.get("HOST") or None,
        "port": config.get("PORT") or None,
    }
    params = {k: v for k, v in params.items() if v}
    name = config["NAME"]
    where = f"{params.get('host', 'localhost')}:{params.get('port', 5432)}/{name}"
    try:
        with psycopg.connect(dbname=name, connect_timeout=5, **params):
            return where
    except psycopg.OperationalError as exc:
        first_error = exc
    try:  # the database may be missing: create it from the maintenance database
        with psycopg.connect(dbname="postgres", autocommit=True, connect_timeout=5, **params) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                return f"{where} (created)"
    except psycopg.OperationalError:
        pass
    text = str(first_error).strip()
    reason = text.splitlines()[0] if text else type(first_error).__name__
    sys.exit(
        f"demo: cannot reach PostgreSQL for {where}: {reason}\n"
        "Start PostgreSQL or point DATABASE_URL at a server, e.g.\n"
        "  DATABASE_URL=postgres://USER:PASSWORD@HOST:5432/lonnymq_demo make demo"
    )


def forget_queue(cursor: Any, queue: str) -> None:
    """Delete every trace of one queue: messages, dedup keys, wake-up marks, dead letters, channels."""
    cursor.execute("SELECT id FROM lonnymq_channel WHERE queue = %s", [queue])
    channel_ids = [row[0] for row in cursor.fetchall()]
    for table in ("lonnymq_message", "lonnymq_dedup", "lonnymq_wake"):
        cursor.execute(f"DELETE FROM {table} WHERE channel_id = ANY(%s)", [channel_ids])
    cursor.execute("DELETE FROM lonnymq_dead_message WHERE queue = %s", [queue])
    cursor.execute("DELETE FROM lonnymq_channel WHERE queue = %s", [queue])


def reset(tenants_table: str) -> None:
    """Delete every trace of the demo queue and the scoreboard (other queues are untouched)."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        forget_queue(cursor, QUEUE)
        forget_queue(cursor, REPORTS)
        cursor.execute(f"TRUNCATE {tenants_table}")


# ---------------------------------------------------------------------------------------
# Workload
# ---------------------------------------------------------------------------------------


def build_tenants(args: argparse.Namespace) -> list[Tenant]:
    rng = random.Random(args.seed)
    names = SMALL_NAMES[: args.small] + [
        f"small-{i:02d}" for i in range(len(SMALL_NAMES) + 1, args.small + 1)
    ]
    tenants = [Tenant(BIG, job_sizes(args.big, rng))]
    if args.premium > 0:
        tenants.append(Tenant(PREMIUM, job_sizes(args.premium, rng), f"weight {PREMIUM_WEIGHT}"))
    for name in names:
        tenant = Tenant(name, job_sizes(args.small_jobs, rng))
        if name == CAPPED:
            tenant.limit = "max_concurrency=1"
        elif name == RATE_LIMITED:
            tenant.limit = RATE
        tenants.append(tenant)
    return tenants


def enqueue_workload(tenants: list[Tenant]) -> float:
    """Limits first, then bigcorp's backlog, then the small tenants. Returns the seconds taken."""
    from django.db import transaction

    from django_lonnymq import Item, enqueue_many
    from django_lonnymq.api import configure_channel

    names = {t.name for t in tenants}
    if CAPPED in names:
        configure_channel(QUEUE, CAPPED, max_concurrency=1)
    if RATE_LIMITED in names:
        configure_channel(QUEUE, RATE_LIMITED, rate=RATE)
    if PREMIUM in names:
        configure_channel(QUEUE, PREMIUM, weight=PREMIUM_WEIGHT)
    started = time.monotonic()
    for tenant in tenants:  # bigcorp is first in the list: its whole backlog is older
        items = [Item({"seconds": s, "n": i}, channel=tenant.name) for i, s in enumerate(tenant.jobs)]
        for start in range(0, len(items), 500):
            with transaction.atomic():  # as a view would: the jobs commit with the request
                enqueue_many(QUEUE, items[start : start + 500])
    return time.monotonic() - started


# ---------------------------------------------------------------------------------------
# Workers and progress
# ---------------------------------------------------------------------------------------


def start_workers(args: argparse.Namespace, logdir: Path) -> list[tuple[subprocess.Popen[bytes], Path]]:
    command = [
        sys.executable,
        str(ROOT / "manage.py"),
        "run_queue_worker",
        "--queue",
        QUEUE,
        "--queue",
        REPORTS,
        "--concurrency",
        str(args.concurrency),
        "--batch-size",
        str(args.batch_size),
        "--burst",
    ]
    # Handler threads keep their database connection between jobs (the handler writes a row
    # per job); with Django's default CONN_MAX_AGE=0 each job would open a new connection.
    url = os.environ["DATABASE_URL"]
    if "conn_max_age" not in url:
        url += ("&" if "?" in url else "?") + "conn_max_age=600"
    env = dict(os.environ, PYTHONUNBUFFERED="1", DATABASE_URL=url)
    workers = []
    for index in range(args.workers):
        log = logdir / f"worker-{index + 1}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        workers.append((proc, log))
    return workers


def done_counts(tenants_table: str) -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT tenant, count(DISTINCT message_id) FROM {tenants_table} WHERE queue = %s GROUP BY tenant",
            [QUEUE],
        )
        return dict(cursor.fetchall())


def in_flight() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id"
            " WHERE c.queue = %s AND m.lease_until IS NOT NULL",
            [QUEUE],
        )
        return int(cursor.fetchone()[0])


class Progress:
    """One line per second: the big tenant, then each small tenant (or their total when many)."""

    def __init__(self, tenants: list[Tenant]):
        self.tenants = tenants
        self.wide = len(tenants) <= 11
        self.width = {t.name: max(len(t.name), len(f"{len(t.jobs)}/{len(t.jobs)}")) for t in tenants}

    def header(self) -> str:
        if self.wide:
            cols = "  ".join(f"{t.name:>{self.width[t.name]}}" for t in self.tenants)
        else:
            cols = f"{BIG:>{self.width[BIG]}}  small tenants (finished)"
        return f"   time  {cols}  in flight"

    def line(self, elapsed: float, done: dict[str, int], flying: int) -> str:
        def cell(t: Tenant) -> str:
            n = done.get(t.name, 0)
            text = "done" if n >= len(t.jobs) and t.name != BIG else f"{n}/{len(t.jobs)}"
            return f"{text:>{self.width[t.name]}}"

        if self.wide:
            cols = "  ".join(cell(t) for t in self.tenants)
        else:
            small = self.tenants[1:]
            finished = sum(done.get(t.name, 0) >= len(t.jobs) for t in small)
            total = sum(len(t.jobs) for t in small)
            got = sum(min(done.get(t.name, 0), len(t.jobs)) for t in small)
            cols = f"{cell(self.tenants[0])}  {got}/{total} ({finished}/{len(small)})"
        return f"{elapsed:6.1f}s  {cols}  {flying:9d}"


def report_workers(workers: list[tuple[subprocess.Popen[bytes], Path]], label: str = "worker") -> list[str]:
    """Print each worker's exit code and its own summary line; the problems of those that failed."""
    problems = []
    for index, (proc, log) in enumerate(workers, 1):
        lines = log.read_text(errors="replace").splitlines()
        stopped = [line for line in lines if " stopped: " in line and line.startswith("lonnymq worker")]
        print(
            f"worker {index}: exit {proc.returncode}; "
            + (stopped[-1].split(" stopped: ", 1)[1] if stopped else "(no summary)")
        )
        if proc.returncode != 0:
            problems.append(f"{label} {index} exited with {proc.returncode}")
            print("  last lines of its log:\n    " + "\n    ".join(lines[-15:]))
    return problems


def watch(
    workers: list[tuple[subprocess.Popen[bytes], Path]],
    tenants: list[Tenant],
    table: str,
    started: float,
    timeout: float,
) -> bool:
    """Print progress every second until every worker exited. False on timeout."""
    progress = Progress(tenants)
    print(progress.header())
    while True:
        time.sleep(1.0)
        running = [p for p, _ in workers if p.poll() is None]
        print(progress.line(time.monotonic() - started, done_counts(table), in_flight()), flush=True)
        if not running:
            return True
        if time.monotonic() - started > timeout:
            for proc in running:
                proc.terminate()
            for proc in running:
                try:
                    proc.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    proc.kill()
            return False


# ---------------------------------------------------------------------------------------
# Summary and verdict
# ---------------------------------------------------------------------------------------


def summarize(
    tenants: list[Tenant], table: str, t0_wall: float, threads: int
) -> tuple[dict[str, float], list[str]]:
    """Print the per-tenant table; returns the finish time of each tenant done, and problems."""
    from django.db import connection

    from django_lonnymq.api import check

    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH ranked AS (
                SELECT tenant, message_id, seconds, started_at, finished_at,
                       row_number() OVER (ORDER BY finished_at, id) AS position
                  FROM {table} WHERE queue = %s)
            SELECT tenant, count(*), count(DISTINCT message_id),
                   extract(epoch FROM min(started_at)), extract(epoch FROM max(finished_at)),
                   max(position), sum(seconds)
              FROM ranked GROUP BY tenant
            """,
            [QUEUE],
        )
        rows = {r[0]: r[1:] for r in cursor.fetchall()}
        cursor.execute(
            "SELECT count(*) FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id"
            " WHERE c.queue = %s",
            [QUEUE],
        )
        left = int(cursor.fetchone()[0])
        cursor.execute("SELECT count(*) FROM lonnymq_dead_message WHERE queue = %s", [QUEUE])
        dead = int(cursor.fetchone()[0])

    total = sum(len(t.jobs) for t in tenants)
    print()
    print(
        f"{'tenant':<10} {'jobs':>5} {'work':>7}  {'limit':<18} {'first start':>11} {'last done':>9}"
        f"  {'last job finished':>17}"
    )
    finish: dict[str, float] = {}
    problems: list[str] = []
    runs = 0
    work = 0.0
    for t in tenants:
        n_runs, n_done, first, last, position, seconds = rows.get(t.name, (0, 0, None, None, None, 0.0))
        runs += n_runs
        work += seconds
        if n_done != len(t.jobs):
            problems.append(f"{t.name}: {n_done} of {len(t.jobs)} jobs recorded")
        if n_runs != n_done:
            problems.append(f"{t.name}: {n_runs - n_done} job(s) ran more than once")
        first_s = f"{float(first) - t0_wall:.1f}s" if first is not None else "-"
        last_s = f"{float(last) - t0_wall:.1f}s" if last is not None else "-"
        if last is not None and n_done == len(t.jobs):
            finish[t.name] = float(last) - t0_wall
        pos = f"#{position} of {total}" if position else "-"
        print(
            f"{t.name:<10} {len(t.jobs):>5} {t.work:>6.1f}s  {t.limit:<18} "
            f"{first_s:>11} {last_s:>9}  {pos:>17}"
        )

    # Throughput from the first job's start (worker start-up excluded) to the last job's end.
    starts = [float(r[2]) for r in rows.values() if r[2] is not None]
    ends = [float(r[3]) for r in rows.values() if r[3] is not None]
    elapsed = max(ends) - min(starts) if starts and ends else 0.0
    print()
    if elapsed > 0:
        print(
            f"throughput: {runs} jobs in {elapsed:.1f}s from the first start = {runs / elapsed:.0f} jobs/s; "
            f"{work:.0f}s of simulated work kept {threads} handler threads "
            f"{100 * work / (threads * elapsed):.0f}% busy"
        )
    if left:
        problems.append(f"{left} message(s) left in queue {QUEUE!r}")
    if dead:
        problems.append(f"{dead} dead message(s) in queue {QUEUE!r}")
    issues = check()
    for p in issues:
        problems.append(f"api.check(): {p.queue}/{p.channel} {p.problem} ({p.detail})")
    print(
        f"messages left: {left}   dead: {dead}   api.check(): "
        f"{'[] (scheduler state matches the messages)' if not issues else f'{len(issues)} problem(s)'}"
    )
    return finish, problems


def periodic_report(table: str, ran_for: float) -> list[str]:
    """One line on the periodic report the workers ran meanwhile; problems if a tick ran twice."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(DISTINCT m.dedup_key), max(r.seconds), max(r.finished_at)"
            f"  FROM {table} r LEFT JOIN lonnymq_dedup m ON m.message_id = r.message_id"
            " WHERE r.queue = %s",
            [REPORTS],
        )
        runs, ticks, latest, _ = cursor.fetchone()
        cursor.execute(
            f"SELECT tenant FROM {table} WHERE queue = %s ORDER BY finished_at DESC LIMIT 1", [REPORTS]
        )
        last = cursor.fetchone()
    print(
        f"periodic report: @periodic(every=2 s) on queue {REPORTS!r} ran {runs} times while the workers ran, "
        f"{ticks} distinct ticks, each at most {float(latest or 0):.1f}s after its time"
        + (f"; the last one saw {last[0].split(' ', 1)[1]} at {last[0].split(' ', 1)[0]} UTC" if last else "")
    )
    problems = []
    if runs != ticks:
        problems.append(f"periodic report: {runs} runs for {ticks} ticks (a tick ran twice)")
    if runs == 0 and ran_for > 5:
        problems.append("periodic report: no tick ran while the workers ran")
    return problems


def fairness(tenants: list[Tenant], finish: dict[str, float]) -> list[str]:
    """The small tenants must finish long before the big one; say how long before."""
    small = [t for t in tenants if t.name not in (BIG, PREMIUM)]
    big = next(t for t in tenants if t.name == BIG)
    if BIG not in finish or any(t.name not in finish for t in small):
        return []
    latest_small = max(finish[t.name] for t in small)
    print(
        f"fairness: the last small tenant finished at {latest_small:.1f}s, "
        f"{BIG} at {finish[BIG]:.1f}s, though {BIG}'s {len(big.jobs)} jobs were enqueued first"
    )
    # Only meaningful when the big backlog dwarfs the small tenants' work.
    if len(big.jobs) >= 10 * max(len(t.jobs) for t in small) and latest_small >= finish[BIG]:
        return [f"a small tenant finished no earlier than {BIG}: the round robin did not hold"]
    return []


def topic_step() -> list[str]:
    """One event type, two consumer groups (example_project/topics_demo.py); one line."""
    from example_project.topics_demo import run_topic_step

    print()
    try:
        return run_topic_step()
    except Exception as exc:  # report it with the other problems, then fail the demo
        return [f"topic step failed: {type(exc).__name__}: {exc}"]


def debounce_step() -> list[str]:
    """One document edited 20 times is re-indexed once (example_project/debounce_demo.py)."""
    from example_project.debounce_demo import run_debounce_step

    try:
        return run_debounce_step()
    except Exception as exc:  # report it with the other problems, then fail the demo
        return [f"debounce step failed: {type(exc).__name__}: {exc}"]


def workflow_step() -> list[str]:
    """One workflow per tenant, fetch -> 3 parse -> merge (example_project/workflows_demo.py); one line."""
    from example_project.workflows_demo import run_workflow_step

    return run_workflow_step()


def durable_step() -> list[str]:
    """One durable handler per tenant: a step, a sleep, an event (example_project/durable_demo.py); one line."""
    from example_project.durable_demo import run_durable_step

    return run_durable_step()


def spark_step(args: argparse.Namespace) -> list[str]:
    """Run example_project/spark_demo.py's step (unless --no-spark); returns its problems."""
    if not args.spark:
        return []
    print("\n== Spark step: a skewed data set becomes queue 'ingest' (spark_demo.py; --no-spark skips) ==")
    try:
        from example_project.spark_demo import run_spark_step

        return run_spark_step(rows=args.spark_rows, workers=args.workers, timeout=args.timeout)
    except Exception as exc:  # report it with the other problems, then fail the demo
        return [f"Spark step failed: {type(exc).__name__}: {exc}"]


def weighted_share(tenants: list[Tenant], table: str) -> list[str]:
    """While premium (weight 3) had a backlog, it got about three jobs to bigcorp's one."""
    from django.db import connection

    premium = next((t for t in tenants if t.name == PREMIUM), None)
    if premium is None:
        return []
    with connection.cursor() as cursor:
        # Jobs of each finished between premium's 10th and 90th percentile finish: both had a
        # backlog then (the small tenants' turns come before, premium's slowest jobs after).
        cursor.execute(
            f"""
            WITH p AS (SELECT finished_at, row_number() OVER (ORDER BY finished_at) AS n,
                              count(*) OVER () AS total
                         FROM {table} WHERE queue = %s AND tenant = %s),
                 w AS (SELECT min(finished_at) FILTER (WHERE n >= total / 10) AS since,
                              min(finished_at) FILTER (WHERE n >= total * 9 / 10) AS until FROM p)
            SELECT tenant, count(DISTINCT message_id) FROM {table}, w
             WHERE queue = %s AND tenant IN (%s, %s) AND finished_at > w.since AND finished_at <= w.until
             GROUP BY tenant
            """,
            [QUEUE, PREMIUM, QUEUE, PREMIUM, BIG],
        )
        done = dict(cursor.fetchall())
    ratio = done.get(PREMIUM, 0) / max(done.get(BIG, 0), 1)
    print(
        f"weights: while both had a backlog, {PREMIUM} (weight {PREMIUM_WEIGHT}) finished "
        f"{done.get(PREMIUM, 0)} jobs to {BIG}'s {done.get(BIG, 0)} ({ratio:.1f} : 1)"
    )
    if len(tenants[0].jobs) >= 3 * len(premium.jobs) and not 2.0 <= ratio <= 4.5:
        return [f"{PREMIUM} got {ratio:.1f} jobs per {BIG} job, not about {PREMIUM_WEIGHT}"]
    return []


TIERS = "tiers"


def tier_change_step() -> list[str]:
    """Pricing tiers (plans): new customers start free, one upgrades, the free tier is
    repriced in one statement; returns its problems."""
    from django.db import connection, transaction

    from django_lonnymq import api, enqueue
    from django_lonnymq.models import Channel

    print(f"\n== Tier change: plans on queue {TIERS!r} ==")
    with transaction.atomic(), connection.cursor() as cursor:  # a clean slate on every run
        forget_queue(cursor, TIERS)
        api.configure_queue(TIERS, default_plan=None)
    api.configure_plan("demo-free", max_concurrency=1, rate="10 / min, burst 10")
    api.configure_plan("demo-premium", weight=3, max_concurrency=20)
    api.configure_queue(TIERS, default_plan="demo-free")
    for n in range(1, 4):
        enqueue(TIERS, {"report": n}, channel=f"customer-{n}")
    api.configure_channel(TIERS, "customer-2", plan="demo-premium")
    changed = api.configure_plan("demo-free", max_concurrency=2)
    rows = {
        c.name: (c.plan.name, c.weight, c.max_concurrency)
        for c in Channel.objects.filter(queue=TIERS).select_related("plan")
    }
    print(
        f"new channels follow demo-free; customer-2 upgraded to demo-premium; repricing demo-free "
        f"(cap 1 -> 2) rewrote {changed} channel(s) in one statement"
    )
    for name, (plan, weight, cap) in sorted(rows.items()):
        print(f"  {name}: plan {plan}, weight {weight}, max_concurrency {cap}")
    expected = {
        "customer-1": ("demo-free", 1, 2),
        "customer-2": ("demo-premium", 3, 20),
        "customer-3": ("demo-free", 1, 2),
    }
    problems = [] if rows == expected else [f"tier change: channels {rows}, expected {expected}"]
    problems += [
        f"tier change: {p.problem} on {p.channel}: {p.detail}" for p in api.check() if p.queue == TIERS
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        forget_queue(cursor, TIERS)
        api.configure_queue(TIERS, default_plan=None)
    return problems


def main() -> int:
    args = parse_args()
    where = ensure_database()

    import django

    django.setup()
    from django.core.management import call_command

    from example_project.tenants.models import JobRun

    table = JobRun._meta.db_table
    print(f"== django-lonnymq demo: database {where} ==")
    call_command("migrate", verbosity=0)
    reset(table)
    tenants = build_tenants(args)
    small_jobs = sum(len(t.jobs) for t in tenants if t.name not in (BIG, PREMIUM))
    seconds = enqueue_workload(tenants)
    total = sum(len(t.jobs) for t in tenants)
    print(
        f"enqueued {total} jobs in {seconds:.2f}s into queue {QUEUE!r}: {BIG} {len(tenants[0].jobs)} first, "
        f"then {PREMIUM} {args.premium}, then {args.small} small tenants with {small_jobs} together"
    )
    print(
        f"limits: {PREMIUM} weight {PREMIUM_WEIGHT}, {CAPPED} max_concurrency=1, {RATE_LIMITED} rate {RATE!r} "
        "(configure_channel)"
    )
    print(
        f"starting {args.workers} worker(s): run_queue_worker --queue {QUEUE} "
        f"--concurrency {args.concurrency} --batch-size {args.batch_size} --burst\n"
    )

    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lonnymq-demo-") as logdir:
        t0_wall = time.time()
        t0 = time.monotonic()
        workers = start_workers(args, Path(logdir))
        if not watch(workers, tenants, table, t0, args.timeout):
            problems.append(f"workers did not finish within {args.timeout:.0f}s (stopped them)")
        print()
        problems += report_workers(workers)

    finish, found = summarize(tenants, table, t0_wall, args.workers * args.concurrency)
    problems += found
    problems += fairness(tenants, finish)
    problems += periodic_report(table, time.monotonic() - t0)
    problems += topic_step()
    problems += debounce_step()
    problems += workflow_step()
    problems += durable_step()
    problems += weighted_share(tenants, table)
    problems += tier_change_step()
    problems += spark_step(args)

    print()
    if problems:
        print("RESULT: FAILED")
        for problem in problems:
            print(f"  - {problem}")
        return 1
    print(
        "RESULT: OK (every job ran once, nothing left or dead, scheduler state consistent, "
        "the debounced document re-indexed once with its last revision, tier change applied, "
        "every tenant's workflow succeeded, every checkout charged and provisioned once"
        + (", Spark export exactly once)" if args.spark else ")")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
