"""``manage.py lonnymq_health``: healthy when nothing is wrong; exit 1 and say what otherwise."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from io import StringIO
from typing import Any

import psycopg
import pytest
from django.core.management import CommandError, call_command

from tests.conftest import ROOT, worker_env
from tests.sql.concurrency import sqlcalls as q

pytestmark = [pytest.mark.django_db(transaction=True)]


def _health(*args: str) -> tuple[str, str | None]:
    """The command's output and its error (None when healthy)."""
    out = StringIO()
    try:
        call_command("lonnymq_health", *args, stdout=out)
    except CommandError as exc:
        return out.getvalue(), str(exc)
    return out.getvalue(), None


def test_healthy_queue_reports_every_section(connect: Callable[..., psycopg.Connection[Any]]) -> None:
    conn = connect()
    q.enqueue(conn, "h", "a")
    q.ack(conn, q.dequeue(conn, "h", 5))
    out, error = _health()
    assert error is None, out
    assert "lonnymq_message:" in out and "dead tuples" in out
    assert "oldest open transaction:" in out
    assert "expired leases: 0" in out
    assert "scheduler check: 0 problem(s)" in out
    assert out.strip().endswith("healthy")


def test_json_report(connect: Callable[..., psycopg.Connection[Any]]) -> None:
    out, error = _health("--json")
    assert error is None
    report = json.loads(out)
    assert report["healthy"] is True and report["problems"] == []
    assert set(report["tables"]) == {"lonnymq_channel", "lonnymq_message", "lonnymq_wake", "lonnymq_dedup", "lonnymq_dead_message"}
    assert report["expired_leases"]["all"] == 0


def test_an_old_snapshot_is_reported(connect: Callable[..., psycopg.Connection[Any]]) -> None:
    holder = connect(autocommit=False)
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1 FROM lonnymq_message LIMIT 1")
    time.sleep(1.2)
    out, error = _health("--max-xact-age", "1")
    assert error is not None and "open for" in error, out
    assert f"pid {holder.info.backend_pid}" in out
    holder.rollback()
    assert _health("--max-xact-age", "1")[1] is None


def test_expired_leases_nobody_recovers_are_reported(connect: Callable[..., psycopg.Connection[Any]]) -> None:
    conn = connect()
    q.enqueue(conn, "h", "a")
    assert len(q.dequeue(conn, "h", 1, lease_ms=1)) == 1
    time.sleep(0.05)
    out, error = _health("--lease-grace", "0")
    assert error is not None and "1 lease(s) expired" in error, out
    # Within the default grace, workers are expected to reap it on their own.
    assert _health()[1] is None


def test_a_stranded_channel_fails_the_check(connect: Callable[..., psycopg.Connection[Any]]) -> None:
    conn = connect()
    channel_id = q.configure(conn, "h", "stuck")
    # A message the scheduler was never told about (written behind the functions' back).
    conn.execute(
        "INSERT INTO lonnymq_message (channel_id, payload, dequeue_at, max_attempts)"
        " VALUES (%s, '{}', lonnymq_now_ms_v1() - 60000, 5)",
        [channel_id],
    )
    out, error = _health("--check-grace", "1")
    assert error is not None and "h/stuck stranded" in error, out


def test_dead_tuples_over_the_threshold_are_reported(connect: Callable[..., psycopg.Connection[Any]]) -> None:
    conn = connect()
    conn.execute("ALTER TABLE lonnymq_message SET (autovacuum_enabled = false)")
    try:
        q.enqueue_many(conn, "h", ["a"] * 500, [{}] * 500)
        conn.execute("DELETE FROM lonnymq_message")
        conn.execute("SELECT pg_stat_force_next_flush()")
        deadline = time.monotonic() + 10
        while True:  # statistics reach the shared view asynchronously
            out, error = _health("--max-dead-tuples", "100")
            if error is not None or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert error is not None and "lonnymq_message has" in error and "dead tuples" in error, out
    finally:
        conn.execute("ALTER TABLE lonnymq_message RESET (autovacuum_enabled)")


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_manage_py_exits_non_zero_when_unhealthy(connect: Callable[..., psycopg.Connection[Any]]) -> None:
    run = [sys.executable, str(ROOT / "manage.py"), "lonnymq_health", "--check-grace", "1"]
    ok = subprocess.run(run, cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    conn = connect()
    q.enqueue(conn, "h", "a")
    q.dequeue(conn, "h", 1, lease_ms=1)
    bad = subprocess.run([*run, "--lease-grace", "0"], cwd=ROOT, env=worker_env(), capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "expired" in bad.stderr
