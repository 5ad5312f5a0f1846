"""What the chaos tests share: their worker processes, the server restart, and the rule that
explains a message handled twice.

``test_chaos.py`` (plain messages) and ``test_workflow_chaos.py`` (workflow steps) kill
``run_queue_worker`` processes with SIGKILL and restart PostgreSQL once; both use these.
"""

from __future__ import annotations

import os
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

from tests import dbserver
from tests.conftest import WORKER_STARTED, worker_env
from tests.conftest import test_database_url as database_url

LEASE_S = 3.0


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, str(default)))


class Workers:
    """The worker processes of one queue, their output, and when each started, served and died."""

    def __init__(self, start_worker: Callable[..., subprocess.Popen[str]], queue: str, batch_size: int) -> None:
        self._start_worker = start_worker
        self._args = ("--queue", queue, "--concurrency", "4", "--batch-size", str(batch_size), "--lease", f"{LEASE_S:g}s")
        self.procs: list[subprocess.Popen[str]] = []
        self.started: dict[int, float] = {}
        self.serving: dict[int, float] = {}  # when each printed its start line
        self.killed: dict[int, float] = {}
        self.output: dict[int, list[str]] = defaultdict(list)

    def start(self) -> subprocess.Popen[str]:
        # Handler threads keep their database connections between messages (with Django's
        # default CONN_MAX_AGE=0 every message would open a new one).
        proc = self._start_worker(*self._args, env=worker_env(DATABASE_URL=database_url() + "?conn_max_age=60"))
        self.started[proc.pid] = time.time()
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()
        self.procs.append(proc)
        return proc

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if WORKER_STARTED in line:
                    self.serving.setdefault(proc.pid, time.time())
                self.output[proc.pid].append(line.rstrip())
        except (ValueError, OSError):  # closed by the fixture at teardown
            pass

    def alive(self) -> list[subprocess.Popen[str]]:
        return [p for p in self.procs if p.poll() is None]

    def kill(self, victim: subprocess.Popen[str]) -> None:
        victim.send_signal(signal.SIGKILL)
        self.killed[victim.pid] = time.time()
        victim.wait(timeout=30)

    def fail_if_one_exited(self) -> None:
        """Fails the test when a worker exited by itself (not killed by the test)."""
        for proc in self.procs:
            if proc.poll() not in (None, -signal.SIGKILL):
                pytest.fail(f"worker {proc.pid} exited with {proc.returncode}:\n{self.tail(proc.pid)}")

    def stop(self) -> list[int]:
        """SIGTERM to every live worker once it has started; the pids that did not stop cleanly.

        A worker started a moment ago may still be importing Django, before its SIGTERM handler
        exists (Python's default would kill it): every live worker finishes starting first, and
        one that never prints its start line within 60 s fails the test with its output.
        """
        until = time.monotonic() + 60
        while time.monotonic() < until and self.booting():
            time.sleep(0.1)
        assert not self.booting(), {pid: self.tail(pid) for pid in self.booting()}
        for proc in self.alive():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            proc.wait(timeout=60)
        time.sleep(0.2)  # let the readers take the last lines
        return [p.pid for p in self.procs if p.returncode not in (0, -signal.SIGKILL)]

    def booting(self) -> list[int]:
        return [p.pid for p in self.alive() if p.pid not in self.serving]

    def tail(self, pid: int, n: int = 15) -> str:
        return "\n".join(self.output.get(pid, [])[-n:])

    def last_output(self, n: int = 8) -> str:
        return "\n".join(self.tail(p.pid, n) for p in self.procs[-4:])

    def explained(self, first_pid: int, first_at: float, restart_window: tuple[float, float] | None) -> bool:
        """Whether a message handled again was first handled by a worker killed after that
        (before its ack went out), or around the restart."""
        killed_at = self.killed.get(first_pid)
        if killed_at is not None and first_at <= killed_at + 0.5:
            return True
        return restart_window is not None and restart_window[0] - LEASE_S - 2 <= first_at <= restart_window[1] + 30


def restarter(conn: psycopg.Connection[Any]) -> Callable[[], None]:
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


def reconnect(connect: Callable[..., psycopg.Connection[Any]], timeout: float = 120) -> psycopg.Connection[Any]:
    """A new connection once the server accepts them again (it may still be restarting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return connect()
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
