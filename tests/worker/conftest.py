"""Acceptance fixtures: real ``run_queue_worker`` processes (or an in-process Worker) on the
real test database, watched through the tables the test handlers write.

Every wait is a polling loop with a deadline; every failure message carries the output of
the workers involved.
"""

from __future__ import annotations

import contextlib
import os
import signal as signals
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.conftest import WORKER_STARTED, worker_env

HOST = socket.gethostname()


class WorkerProc:
    """A ``run_queue_worker`` subprocess whose output is drained by a thread (so a chatty
    worker never blocks on a full pipe) and kept for assertions and failure messages."""

    def __init__(self, proc: subprocess.Popen[str], label: str):
        self.proc = proc
        self.label = label
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def application_name(self) -> str:
        """The application_name of the worker's control connection (see Worker._connect)."""
        return f"lonnymq-worker {HOST}:{self.pid}"[:63]

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """The exit code; fails the test (with the output) if the worker outlives ``timeout``."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self._reader.join(timeout=5)
            pytest.fail(f"{self.label} still running after {timeout}s; output:\n{self.output}")
        self._reader.join(timeout=5)
        return code

    def stop(self, timeout: float = 15, sig: int = signals.SIGTERM) -> int:
        """Signal the worker and wait for it to exit. A worker still importing Django has no
        SIGTERM handler yet (Python's default would kill it with -15): wait until the command
        has printed its start line, which it does after installing its handlers."""
        if self.alive():
            self.wait_for_line(WORKER_STARTED, timeout=60)
            self.signal(sig)
        return self.wait(timeout)

    def wait_for_line(self, text: str, timeout: float = 10) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            if not self.alive() and not self._reader.is_alive():
                break
            time.sleep(0.02)
        pytest.fail(f"{self.label} never printed {text!r} within {timeout}s; output:\n{self.output}")

    def stats(self) -> dict[str, float]:
        """The counters of the final 'stopped: ...' line."""
        line = self.wait_for_line(" stopped: ", timeout=0.1)
        found: dict[str, float] = {}
        for part in line.split(" stopped: ", 1)[1].split():
            key, _, value = part.partition("=")
            with contextlib.suppress(ValueError):
                found[key] = float(value.rstrip("s/"))
        return found


def wait_until(
    predicate: Callable[[], Any], timeout: float, what: str, *procs: WorkerProc, interval: float = 0.05
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            outputs = "\n".join(f"--- {p.label} (pid {p.pid}, alive={p.alive()}):\n{p.output}" for p in procs)
            pytest.fail(f"timed out after {timeout}s waiting for {what}\n{outputs}")
        time.sleep(interval)


def run_in_thread(worker: Any, timeout: float = 30) -> Any:
    """Run an in-process :class:`~django_lonnymq.worker.Worker` on a thread; its stats."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["stats"] = worker.run()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            result["error"] = exc

    thread = threading.Thread(target=target, name="acc-worker", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        worker.stop()
        thread.join(10)
        pytest.fail(f"in-process worker still running after {timeout}s")
    if "error" in result:
        raise result["error"]
    return result["stats"]


def describe(*procs: WorkerProc) -> str:
    return "\n".join(f"--- {p.label} (pid {p.pid}):\n{p.output}" for p in procs)


class DB:
    """A raw autocommit psycopg connection with small query helpers."""

    def __init__(self, conn: psycopg.Connection[Any]):
        self.conn = conn

    def rows(self, statement: str, params: Any = None) -> list[dict[str, Any]]:
        with self.conn.cursor(row_factory=dict_row) as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def scalar(self, statement: str, params: Any = None) -> Any:
        found = self.rows(statement, params)
        return next(iter(found[0].values())) if found else None

    def deliveries(self, queue: str | None = None) -> list[dict[str, Any]]:
        if queue is None:
            return self.rows("SELECT * FROM testapp_delivery ORDER BY id")
        return self.rows("SELECT * FROM testapp_delivery WHERE queue = %s ORDER BY id", [queue])

    def events(self, event: str, queue: str | None = None) -> list[dict[str, Any]]:
        return [d for d in self.deliveries(queue) if d["event"] == event]

    def messages(self, queue: str) -> list[dict[str, Any]]:
        return self.rows(
            "SELECT m.*, c.name AS channel_name FROM lonnymq_message m"
            " JOIN lonnymq_channel c ON c.id = m.channel_id WHERE c.queue = %s ORDER BY m.id",
            [queue],
        )

    def dead(self, queue: str) -> list[dict[str, Any]]:
        return self.rows("SELECT * FROM lonnymq_dead_message WHERE queue = %s ORDER BY id", [queue])

    def channel(self, queue: str, name: str = "default") -> dict[str, Any]:
        found = self.rows("SELECT * FROM lonnymq_channel WHERE queue = %s AND name = %s", [queue, name])
        assert found, f"no channel {queue}/{name}"
        return found[0]

    def backend(self, proc: WorkerProc) -> dict[str, Any] | None:
        found = self.rows(
            "SELECT pid, state, query FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            [proc.application_name],
        )
        return found[0] if found else None

    def track_inflight(self, *channels: str) -> None:
        """Rows the t_sleep handler counts its in-flight deliveries in."""
        for name in channels:
            self.rows("INSERT INTO testapp_inflight (channel) VALUES (%s) ON CONFLICT DO NOTHING", [name])


@pytest.fixture
def db(connect: Callable[..., psycopg.Connection[Any]], recording: None) -> DB:
    return DB(connect())


@pytest.fixture
def spawn(
    start_worker: Callable[..., subprocess.Popen[str]], recording: None
) -> Iterator[Callable[..., WorkerProc]]:
    """Start a worker process: ``spawn("--queue", "t_record", "--burst", settings=...)``."""
    started: list[WorkerProc] = []

    def start(*args: str, settings: str | None = None, label: str | None = None, **env: str) -> WorkerProc:
        extra = dict(env)
        if settings:
            extra["DJANGO_SETTINGS_MODULE"] = settings
        worker = WorkerProc(
            start_worker(*args, env=worker_env(**extra)), label or f"worker {len(started) + 1}"
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:  # start_worker kills leftovers; SIGTERM first so they clean up
        if worker.alive():
            worker.signal(signals.SIGTERM)
    for worker in started:
        try:
            worker.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(worker.pid, signals.SIGKILL)


def wait_idle(db: DB, *procs: WorkerProc, timeout: float = 15) -> None:
    """Until each worker's control connection has polled and sits idle (nothing to fetch)."""
    for proc in procs:

        def idle(proc: WorkerProc = proc) -> bool:
            backend = db.backend(proc)
            return bool(backend and backend["state"] == "idle" and "lonnymq_next_due_v1" in backend["query"])

        wait_until(idle, timeout, f"{proc.label} to sit idle", proc)


class TcpProxy:
    """A TCP forwarder to the test database that starts out refusing connections (the port is
    bound but not listening), can be opened later, and can cut every connection it carries."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._closed = False

    def open(self) -> None:
        self._server.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> int:
        """Drop every connection carried so far; returns how many."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
        return len(pairs)

    def close(self) -> None:
        self._closed = True
        self._server.close()
        self.cut()


@pytest.fixture
def proxy(transactional_db: None) -> Iterator[TcpProxy]:
    from django.db import connection

    s = connection.settings_dict
    found = TcpProxy((s["HOST"] or "127.0.0.1", int(s["PORT"] or 5432)))
    yield found
    found.close()


def proxied_database_url(proxy: TcpProxy) -> str:
    from django.db import connection

    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@127.0.0.1:{proxy.port}/{s['NAME']}"
