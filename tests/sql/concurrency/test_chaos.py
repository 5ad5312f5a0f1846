"""Chaos: workers killed with SIGKILL every few seconds and one PostgreSQL restart lose nothing.

20k messages (``LONNYMQ_CHAOS_MESSAGES``) over 50 channels with concurrency limits are
processed by 4 ``manage.py run_queue_worker`` processes (--concurrency 4 --batch-size 50
--lease 3s). Every ``LONNYMQ_CHAOS_KILL_EVERY`` seconds (default 2.5) one worker is killed
with SIGKILL and a new one started; once, about a third of the way through, the PostgreSQL
server is restarted. Workers reconnect on their own.

Which server is restarted: the throwaway cluster the test run started itself (no
``DATABASE_URL``: tests/dbserver.py), or, only when the run opts in with
``LONNYMQ_TEST_RESTART_SERVER=1`` (CI does), the local ``pg_ctlcluster`` cluster that
``DATABASE_URL`` names. A server named by ``DATABASE_URL`` without the opt-in is never
restarted: the test fails and says how to opt in, or to leave the restart out with
``LONNYMQ_CHAOS_RESTART=0``.

The run's random choices come from one seed, printed at the start (``chaos: seed N``, shown
with a failure); ``LONNYMQ_CHAOS_SEED=N`` replays it.

At the end: every message was handled (the t_record handler wrote a 'done' row for it), a
message handled twice was first handled by a worker that was then killed, or around the
restart; nothing died; every channel's in_flight and the queue-wide cap's are back to 0; the
checker is clean. Some channels have weights and token buckets, and the queue has a queue-wide
cap of 12 and a bucket.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests import dbserver
from tests.conftest import WORKER_STARTED, worker_env
from tests.conftest import test_database_url as database_url
from tests.sql.concurrency import sqlcalls as q

# alone: it restarts the server, which every other test on it would see (CONTRIBUTING.md)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.alone]

QUEUE = "t_record"
CHANNELS = [f"chaos-{i:02d}" for i in range(50)]
LEASE_S = 3.0


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


def _restarter(conn: psycopg.Connection[Any]) -> Callable[[], None]:
    """How to restart the test database's server, when this run may; fails the test otherwise."""
    if dbserver._started_cluster:
        return lambda: None if dbserver.restart_started_cluster() else pytest.fail("the cluster is gone")
    if os.environ.get(dbserver.RESTART_OPT_IN) != "1":
        pytest.fail(
            "the chaos test restarts PostgreSQL, and the test database is on a server named by "
            f"DATABASE_URL, which this run did not start. Set {dbserver.RESTART_OPT_IN}=1 to let it "
            "restart that server (a local pg_ctlcluster cluster; CI does), LONNYMQ_CHAOS_RESTART=0 to "
            "leave the restart out, or unset DATABASE_URL to run on a throwaway cluster."
        )
    cluster = _local_cluster(conn)

    def restart() -> None:
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, "restart"],
                       check=True, capture_output=True, timeout=120)

    return restart


def _local_cluster(conn: psycopg.Connection[Any]) -> tuple[str, str]:
    """(version, name) of the pg_ctlcluster cluster serving ``conn``; fails the test if none."""
    how = (
        f"with {dbserver.RESTART_OPT_IN}=1 the chaos test restarts the server of DATABASE_URL with "
        "pg_ctlcluster, so it must be a local cluster managed by pg_ctlcluster "
        "(CI: DATABASE_URL=postgres://postgres@127.0.0.1:5432/...). "
        "Set LONNYMQ_CHAOS_RESTART=0 to run it without the restart."
    )
    if shutil.which("pg_lsclusters") is None or shutil.which("pg_ctlcluster") is None:
        pytest.fail(f"pg_lsclusters/pg_ctlcluster not found: {how}")
    try:
        data_dir = conn.execute("SHOW data_directory").fetchone()[0]
        port = int(conn.execute("SHOW port").fetchone()[0])
    except psycopg.Error as exc:
        pytest.fail(f"cannot read the server's data_directory ({exc}): {how}")
    listing = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True, check=True).stdout
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[5] == data_dir and int(fields[2]) == port:
            return fields[0], fields[1]
    pytest.fail(f"the test database's server (data directory {data_dir}, port {port}) is not a local cluster: {how}")


def _reconnect(connect: Callable[..., psycopg.Connection[Any]], timeout: float = 120) -> psycopg.Connection[Any]:
    """A new connection once the server accepts them again (it may still be restarting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return connect()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


class Workers:
    """The worker processes, their output, and when each was started and killed."""

    def __init__(self, start_worker: Callable[..., subprocess.Popen[str]]) -> None:
        self._start_worker = start_worker
        self.procs: list[subprocess.Popen[str]] = []
        self.started: dict[int, float] = {}
        self.killed: dict[int, float] = {}
        self.output: dict[int, list[str]] = defaultdict(list)

    def start(self) -> subprocess.Popen[str]:
        proc = self._start_worker(
            "--queue", QUEUE, "--concurrency", "4", "--batch-size", "50", "--lease", f"{LEASE_S:g}s",
            # Handler threads keep their database connections between messages (with Django's
            # default CONN_MAX_AGE=0 every message would open a new one).
            env=worker_env(DATABASE_URL=database_url() + "?conn_max_age=60"),
        )
        self.started[proc.pid] = time.time()
        reader = threading.Thread(target=self._read, args=(proc,), daemon=True)
        reader.start()
        self.procs.append(proc)
        return proc

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                self.output[proc.pid].append(line.rstrip())
        except (ValueError, OSError):  # closed by the fixture at teardown
            pass

    def alive(self) -> list[subprocess.Popen[str]]:
        return [p for p in self.procs if p.poll() is None]

    def kill_one(self, rng: random.Random) -> int:
        victim = rng.choice(self.alive())
        victim.send_signal(signal.SIGKILL)
        self.killed[victim.pid] = time.time()
        victim.wait(timeout=30)
        return victim.pid

    def tail(self, pid: int, n: int = 15) -> str:
        return "\n".join(self.output.get(pid, [])[-n:])


def test_sigkilled_workers_and_a_database_restart_lose_nothing(
    start_worker: Callable[..., subprocess.Popen[str]],
    connect: Callable[..., psycopg.Connection[Any]],
    recording: None,
) -> None:
    total = _env_int("LONNYMQ_CHAOS_MESSAGES", 20_000)
    kill_every = float(os.environ.get("LONNYMQ_CHAOS_KILL_EVERY", "2.5"))
    restart = os.environ.get("LONNYMQ_CHAOS_RESTART", "1") != "0"
    seed = _env_int("LONNYMQ_CHAOS_SEED", random.randrange(1 << 30))
    print(f"chaos: seed {seed} (replay with LONNYMQ_CHAOS_SEED={seed})")
    rng = random.Random(seed)

    admin = connect()
    restart_server = _restarter(admin) if restart else None
    for i, name in enumerate(CHANNELS):
        q.configure(admin, QUEUE, name, max_concurrency=1 + i % 5)
    # Every limit kind on some channels (weights, token buckets) and a queue-wide cap and
    # bucket: killed workers' queue slots must come back too.
    for i, name in enumerate(CHANNELS[:10]):
        rate = (200, 1000, 10) if i % 2 else (None, None, None)
        admin.execute(
            "SELECT lonnymq_configure_channel_v3(%s, %s, NULL, false, NULL, NULL, %s, %s, %s, %s, false)",
            [QUEUE, name, 1 + i % 3, *rate],
        )
    admin.execute("SELECT lonnymq_configure_queue_v1(%s, 12, false, 5000, 1000, 200, false)", [QUEUE])
    ids: list[int] = []
    for start in range(0, total, 1000):
        n = min(1000, total - start)
        ids += q.enqueue_many(
            admin, QUEUE, [rng.choice(CHANNELS) for _ in range(n)], [{"n": start + k} for k in range(n)],
            max_attempts=50,
        )
    assert len(set(ids)) == total

    workers = Workers(start_worker)
    for _ in range(4):
        workers.start()

    restart_window: tuple[float, float] | None = None
    deadline = time.monotonic() + _env_int("LONNYMQ_CHAOS_TIMEOUT", 400)
    next_kill = time.monotonic() + kill_every
    done = left = 0
    while time.monotonic() < deadline:
        time.sleep(0.25)
        try:
            done = admin.execute(
                "SELECT count(DISTINCT message_id) FROM testapp_delivery WHERE event = 'done' AND queue = %s",
                [QUEUE],
            ).fetchone()[0]
            left = admin.execute("SELECT count(*) FROM lonnymq_message").fetchone()[0]
        except psycopg.OperationalError:
            connection.close()  # the server restarted: Django's connection is gone too
            admin = _reconnect(connect)  # and so is ours
            continue
        if done >= total and left == 0:
            break
        if restart and restart_window is None and done >= total // 3:
            assert restart_server is not None
            began = time.time()
            restart_server()
            restart_window = (began, time.time())
            connection.close()  # Django's own connection is gone too
            admin = _reconnect(connect)
            print(f"chaos: PostgreSQL restarted in {restart_window[1] - began:.1f}s at {done}/{total}")
            continue
        if time.monotonic() >= next_kill:
            workers.kill_one(rng)
            workers.start()
            next_kill = time.monotonic() + kill_every
        for proc in workers.procs:
            if proc.poll() not in (None, -signal.SIGKILL):
                pytest.fail(f"worker {proc.pid} exited with {proc.returncode}:\n{workers.tail(proc.pid)}")

    # A worker started a moment ago may still be importing Django, before its SIGTERM handler
    # exists (Python's default would kill it): let every live worker finish starting first.
    booting_until = time.monotonic() + 60

    def booting() -> list[int]:
        return [p.pid for p in workers.alive() if not any(WORKER_STARTED in line for line in workers.output.get(p.pid, []))]

    while time.monotonic() < booting_until and booting():
        time.sleep(0.1)
    assert not booting(), {pid: workers.tail(pid) for pid in booting()}  # never printed its start line
    for proc in workers.alive():
        proc.send_signal(signal.SIGTERM)
    for proc in workers.procs:
        proc.wait(timeout=60)
    time.sleep(0.2)  # let the readers take the last lines
    stopped_badly = [p.pid for p in workers.procs if p.returncode not in (0, -signal.SIGKILL)]
    print(
        f"chaos: {total} messages, {len(workers.killed)} workers killed, {len(workers.procs)} started, "
        f"restart={'yes' if restart_window else 'no'}; handled {done}, left {left}"
    )
    for pid in workers.started:
        summary = [line for line in workers.output.get(pid, []) if "stopped:" in line]
        if summary:
            print(f"chaos: worker {pid}: {summary[-1].split('stopped: ', 1)[1]}")

    assert done == total and left == 0, (
        f"seed {seed}: {total - done} message(s) never handled, {left} left in the table; last worker output:\n"
        + "\n".join(workers.tail(p.pid, 8) for p in workers.procs[-4:])
    )
    assert not stopped_badly, {pid: workers.tail(pid) for pid in stopped_badly}

    # Redeliveries: a message handled more than once was first handled by a worker that was
    # killed after that (before its ack went out), or around the restart.
    rows = admin.execute(
        "SELECT message_id, array_agg(pid ORDER BY at), array_agg(extract(epoch FROM at)::float8 ORDER BY at)"
        " FROM testapp_delivery WHERE event = 'done' AND queue = %s GROUP BY message_id HAVING count(*) > 1",
        [QUEUE],
    ).fetchall()
    unexplained = []
    for message_id, pids, ats in rows:
        first_pid, first_at = pids[0], ats[0]
        killed_at = workers.killed.get(first_pid)
        by_killed = killed_at is not None and first_at <= killed_at + 0.5
        near_restart = restart_window is not None and (
            restart_window[0] - LEASE_S - 2 <= first_at <= restart_window[1] + 30
        )
        if not (by_killed or near_restart):
            unexplained.append((message_id, pids, ats))
    print(f"chaos: {len(rows)} message(s) handled more than once, all explained: {not unexplained}")
    assert not unexplained, f"seed {seed}: redelivered without a kill or restart to explain it: {unexplained[:10]}"

    assert admin.execute("SELECT count(*) FROM lonnymq_dead_message").fetchone()[0] == 0
    assert admin.execute(
        "SELECT count(*) FROM lonnymq_channel WHERE queue = %s AND in_flight <> 0", [QUEUE]
    ).fetchone()[0] == 0
    assert admin.execute("SELECT in_flight FROM lonnymq_queue_config WHERE queue = %s", [QUEUE]).fetchone()[0] == 0
    assert q.check(admin, 0) == []
