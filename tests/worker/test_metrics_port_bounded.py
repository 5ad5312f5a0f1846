"""The metrics port cannot cut a worker off from its database.

- a half-sent request is dropped after a few seconds (50+ idle connections are closed by the
  server), and a real scrape answers meanwhile;
- the port listens on 127.0.0.1 unless ``--metrics-host`` says otherwise;
- a reconnect that runs out of file descriptors (``OSError``: too many open files) is retried
  with a back-off and said in the log, and the worker serves again once descriptors free up.
"""

from __future__ import annotations

import contextlib
import re
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

from django_lonnymq import enqueue
from tests.worker.conftest import WorkerProc, describe, wait_until

ROOT = Path(__file__).resolve().parents[2]
URL = re.compile(r"metrics on http://([^/]+):(\d+)/metrics")
# The server drops a request not fully sent within this (prometheus/worker.py REQUEST_TIMEOUT).
REQUEST_TIMEOUT = 5


def address_of(worker: WorkerProc) -> tuple[str, int]:
    found = URL.search(worker.wait_for_line("metrics on http://", timeout=60))
    assert found, describe(worker)
    return found[1], int(found[2])


def half_open(port: int, count: int) -> list[socket.socket]:
    """Connections that send half a request and then nothing."""
    opened = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # no blank line: never complete
        opened.append(sock)
    return opened


def closed_by_server(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(65536) == b"" or True  # EOF, or whatever the server said before closing
    except TimeoutError:
        return False
    except OSError:
        return True  # reset


def test_half_open_connections_are_dropped_and_scrapes_still_answer(spawn, db) -> None:
    worker = spawn("--queue", "t_record", "--metrics-port", "0")
    host, port = address_of(worker)
    assert host == "127.0.0.1", describe(worker)
    opened = half_open(port, 60)
    try:
        started = time.monotonic()
        response = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert response.status_code == 200 and "lonnymq_worker_info" in response.text
        for sock in opened:
            left = max(REQUEST_TIMEOUT * 3 - (time.monotonic() - started), 0.1)
            assert closed_by_server(sock, left), f"still open after {time.monotonic() - started:.1f}s"
        took = time.monotonic() - started
        print(f"60 half-open connections closed by the server within {took:.1f}s")
        assert took <= REQUEST_TIMEOUT * 3
    finally:
        for sock in opened:
            sock.close()
    assert worker.alive() and worker.stop() == 0, describe(worker)


def listening_addresses(port: int) -> set[str]:
    """Local addresses of sockets listening on ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as lines:
            for line in list(lines)[1:]:
                local, state = line.split()[1], line.split()[3]
                address, _, hex_port = local.partition(":")
                if state == "0A" and int(hex_port, 16) == port:
                    found.add(address)
    return found


def test_the_metrics_port_listens_on_localhost_by_default(spawn, db) -> None:
    worker = spawn("--queue", "t_record", "--metrics-port", "0")
    host, port = address_of(worker)
    assert host == "127.0.0.1"
    assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1 only, no 0.0.0.0 / ::
    assert worker.stop() == 0, describe(worker)

    other = spawn("--queue", "t_record", "--metrics-port", "0", "--metrics-host", "0.0.0.0")
    host, port = address_of(other)
    assert host == "0.0.0.0" and listening_addresses(port) == {"00000000"}
    assert other.stop() == 0, describe(other)


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def test_a_reconnect_out_of_file_descriptors_is_retried(start_worker, db) -> None:
    from tests.conftest import worker_env

    limit = 96  # below what the server may hold (MAX_CONNECTIONS) plus what the worker needs

    def low_fd_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "run_queue_worker",
            "--queue",
            "t_record",
            "--metrics-port",
            "0",
        ],
        cwd=ROOT,
        env=worker_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=low_fd_limit,
    )
    worker = WorkerProc(proc, "low-fd worker")
    opened: list[socket.socket] = []
    try:
        _, port = address_of(worker)
        wait_until(lambda: db.backend(worker), 30, "the worker's connection", worker)
        # Fill the worker's descriptor table with idle connections to its metrics port.
        with contextlib.suppress(OSError):
            opened += half_open(port, limit)
        wait_until(lambda: open_fds(worker.pid) >= limit - 2, 10, "a full descriptor table", worker)
        db.rows(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            [worker.application_name],
        )

        # Out of descriptors, a reconnect fails in libpq ("connection is bad": logged as the
        # database unavailable) or in Python (psycopg's selector: OSError, too many open
        # files, which once killed the worker); which one comes first is a race. Either way
        # the worker says why, backs off and stays up.
        def failed_reconnect() -> str | None:
            lines = worker.output.splitlines()
            return next(
                (li for li in lines if "out of a resource" in li or "database unavailable" in li), None
            )

        line = wait_until(failed_reconnect, 30, "a failed reconnect logged", worker)
        assert worker.alive(), describe(worker)
        assert "retrying in" in line, line
        if "out of a resource" in line:
            assert "Too many open files" in line, line
        # The idle connections are dropped after the request timeout: descriptors free up.
        wait_until(lambda: "connected to the database again" in worker.output, 60, "a reconnect", worker)
        message_id = enqueue("t_record", {"n": 1})
        wait_until(
            lambda: [d for d in db.events("done", "t_record") if d["message_id"] == message_id],
            30,
            "the worker to serve again",
            worker,
        )
        assert worker.stop() == 0, describe(worker)
    finally:
        for sock in opened:
            sock.close()
        if worker.alive():
            proc.kill()
        proc.wait(timeout=30)
