"""The worker's own connection runs with LONNYMQ_WORKER_SYNCHRONOUS_COMMIT ("on" by default,
so a committed ack survives a server crash, and a lease once its message's outcome is
recorded, as docs/failure-model.md says)."""

from __future__ import annotations

import threading

import pytest
from django.test import override_settings

from django_lonnymq import db, enqueue
from django_lonnymq.worker.connection import ControlConnection
from django_lonnymq.worker.stats import Stats

pytestmark = pytest.mark.django_db(transaction=True)


def worker_setting() -> str:
    conn = ControlConnection("default", "t-sync", Stats(), threading.Event()).connect()
    try:
        return str(conn.execute("SHOW synchronous_commit").fetchone()[0])
    finally:
        conn.close()


def test_the_worker_commits_synchronously_by_default() -> None:
    assert worker_setting() == "on"


@pytest.mark.parametrize("value", ["off", "local", "on"])
def test_the_worker_connection_takes_the_setting(value: str) -> None:
    with override_settings(LONNYMQ_WORKER_SYNCHRONOUS_COMMIT=value):
        assert worker_setting() == value


def test_a_lease_commits_without_waiting_for_the_flush_and_the_ack_waits() -> None:
    """The dequeue statement sets synchronous_commit off for its own transaction only: the
    handler starts without waiting for the WAL flush of its lease (idle latency), and the
    worker's next commit with the setting on (an ack, a failure) flushes the lease with it."""
    enqueue("t_sync", {"n": 1}, channel="a")
    conn = ControlConnection("default", "t-sync", Stats(), threading.Event()).connect()
    try:
        params = {"queue": "t_sync", "batch_size": 10, "lease_ms": 30_000, "worker": "t", "tolerance_ms": 50}
        with conn.transaction():
            rows = db.run(conn, "dequeue", params)
            assert len(rows) == 1
            assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "off"
        assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
        # An empty dequeue leaves the setting as it was too.
        assert db.run(conn, "dequeue", params) == []
        assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
    finally:
        conn.close()
