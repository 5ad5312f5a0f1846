"""A session that holds a snapshot open longer than LONNYMQ_HORIZON_ALARM fails
``lonnymq_health`` and shows on the dashboard, named (pid, user, application, state,
statement), and the alarm goes once the session commits."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from io import StringIO
from typing import Any

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from django.urls import reverse

from django_lonnymq import alarms, api
from tests.admin.test_alarms import live_worker

QUEUE = "t_horizon"
DASHBOARD = reverse("admin:django_lonnymq_channel_dashboard")
# Every other section of the command judged loosely: only the horizon is under test.
LOOSE = ["--max-dead-tuples", "100000000", "--check-grace", "60"]

pytestmark = [pytest.mark.django_db(transaction=True)]


def _health(*args: str) -> tuple[dict[str, Any], str | None]:
    out = StringIO()
    try:
        call_command("lonnymq_health", "--json", *LOOSE, *args, stdout=out)
    except CommandError as exc:
        return json.loads(out.getvalue()), str(exc)
    return json.loads(out.getvalue()), None


def _held_longer_than(pid: int, seconds: float) -> None:
    """Wait until the session ``pid`` has held the horizon for more than ``seconds``."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ages = [h.age_seconds for h in alarms.horizon_holders() if h.pid == pid]
        if ages and ages[0] is not None and ages[0] > seconds:
            return
        time.sleep(0.02)
    raise AssertionError(f"session {pid} never held the horizon for {seconds}s")


def _hold_snapshot(connect: Callable[..., psycopg.Connection[Any]]) -> psycopg.Connection[Any]:
    holder = connect()
    holder.execute("SET application_name = 'nightly-report'")
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1")
    return holder


@override_settings(LONNYMQ_HORIZON_ALARM=0.2)
def test_a_held_snapshot_rings_in_health_and_on_the_dashboard(
    connect: Callable[..., psycopg.Connection[Any]], admin_client: Client
) -> None:
    api.enqueue(QUEUE, {"n": 1})
    live_worker([QUEUE])
    holder = _hold_snapshot(connect)
    pid = holder.info.backend_pid
    _held_longer_than(pid, 0.2)

    report, error = _health()
    assert error is not None, report
    assert f"session pid {pid} (user " in error and "application 'nightly-report'" in error
    assert "idle in transaction" in error and "statement: SELECT 1" in error
    assert "has held the xmin horizon back for" in error and "more than 0.2s" in error
    assert [a["kind"] for a in report["horizon_alarms"]] == ["horizon"]
    [held] = [h for h in report["horizon"] if h["pid"] == pid]
    assert (
        held["kind"] == "session" and held["state"] == "idle in transaction" and held["query"] == "SELECT 1"
    )
    assert held["application_name"] == "nightly-report" and held["xact_start"] and held["query_start"]
    # The flag overrides the setting; None judges nothing.
    assert _health("--max-xact-age", "3600")[1] is None
    with override_settings(LONNYMQ_HORIZON_ALARM=None):
        assert _health()[1] is None

    page = admin_client.get(DASHBOARD).content.decode()
    assert 'id="lq-alarms"' in page and 'class="lq-alarm-horizon"' in page
    assert f"session pid {pid} (user " in page and "has held the xmin horizon back for" in page

    holder.execute("COMMIT")
    report, error = _health()
    assert error is None, report["problems"]
    assert all(h["pid"] != pid for h in report["horizon"])
    page = admin_client.get(DASHBOARD).content.decode()
    assert 'id="lq-alarms"' not in page


@override_settings(LONNYMQ_HORIZON_ALARM=0.2)
def test_a_write_transaction_idle_between_statements_holds_the_horizon(
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    """READ COMMITTED, idle in transaction after a write: no snapshot (backend_xmin is NULL
    between statements), but its transaction id holds the horizon back all the same."""
    holder = connect()
    holder.execute("BEGIN")
    holder.execute("SELECT pg_current_xact_id()")
    pid = holder.info.backend_pid
    _held_longer_than(pid, 0.2)
    report, error = _health()
    assert error is not None and f"session pid {pid} " in error, report
    holder.execute("ROLLBACK")
    assert _health()[1] is None


def test_an_inactive_slot_rings_whatever_its_age() -> None:
    """A replication slot's xmin carries no time: an inactive one rings (nothing moves it
    on), an active one is listed only."""
    slot = alarms.HorizonHolder(
        kind="replication slot", pid=None, user=None, application_name=None, state="inactive",
        xact_start=None, query_start=None, age_seconds=None, xid_age=1234, query=None, name="standby_1",
    )  # fmt: skip
    [alarm] = alarms.horizon_alarms([slot], max_age=300)
    assert alarm.kind == alarms.HORIZON and "replication slot standby_1 (inactive)" in alarm.text
    assert "1,234 transactions back" in alarm.text
    active = alarms.HorizonHolder(**{**slot.__dict__, "state": "active", "pid": 42})
    assert alarms.horizon_alarms([active], max_age=300) == []
