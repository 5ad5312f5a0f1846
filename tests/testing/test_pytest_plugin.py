"""The pytest plugin users get with the package (django_lonnymq.pytest_plugin): registered by its
``pytest11`` entry point, importing no Django at startup, and one test per fixture."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from django_lonnymq import eager as eager_mode
from django_lonnymq import enqueue, enqueue_many
from django_lonnymq.models import DeadMessage
from django_lonnymq.pytest_plugin import Enqueued
from tests.conftest import RECORDING_TABLES

ROOT = Path(__file__).resolve().parents[2]


def deliveries() -> list[tuple[str, str]]:
    """(channel, event) of each delivery the test handlers recorded, in order."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT channel, event FROM testapp_delivery ORDER BY id")
        return list(cursor.fetchall())


def test_the_plugin_is_registered_by_its_entry_point(pytestconfig: pytest.Config) -> None:
    import django_lonnymq.pytest_plugin

    # Registered under the entry point's name: nothing in this suite's conftest loads it.
    assert pytestconfig.pluginmanager.get_plugin("lonnymq") is django_lonnymq.pytest_plugin


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_pytest_starts_without_django_settings_and_without_importing_django(tmp_path: Path) -> None:
    """A project that has the package installed but no Django settings runs its tests; the
    plugin is loaded, lists its fixtures, and imported no Django module."""
    (tmp_path / "test_plain.py").write_text(
        "import sys\n\n"
        "def test_plain(request):\n"
        "    assert request.config.pluginmanager.has_plugin('lonnymq')\n"
        "    assert not [m for m in sys.modules if m == 'django' or m.startswith('django.')]\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    # pytest-django is left out (-p no:django): it would import Django itself.
    args = [sys.executable, "-m", "pytest", "-p", "no:django", "-p", "no:cacheprovider", "-q"]
    done = subprocess.run([*args, str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    listed = subprocess.run([*args, "--fixtures"], cwd=tmp_path, env=env, capture_output=True, text=True)
    for fixture in ("lonnymq_eager", "lonnymq_drain", "lonnymq_enqueued"):
        assert fixture in listed.stdout, listed.stdout + listed.stderr


def test_lonnymq_eager_runs_each_handler_when_its_enqueue_returns(lonnymq_eager: None) -> None:
    assert eager_mode.enabled()
    assert connection.in_atomic_block  # the test's transaction (db), never committed
    with connection.cursor() as cursor:
        cursor.execute(RECORDING_TABLES)
    enqueue("t_record", {"n": 1}, channel="acme")
    assert deliveries() == [("acme", "done")]
    enqueue_many("t_record", [{"n": 2}, {"n": 3}], channel="globex")
    assert deliveries() == [("acme", "done"), ("globex", "done"), ("globex", "done")]
    failed = enqueue("t_fail", {}, channel="acme", max_attempts=2)
    assert DeadMessage.objects.get(id=failed).attempts == 2  # retried at once, then dead


@pytest.mark.django_db
def test_without_the_fixture_eager_mode_is_off() -> None:
    assert not eager_mode.enabled()


def test_lonnymq_drain_runs_a_real_worker_on_committed_messages(lonnymq_drain, recording: None) -> None:  # type: ignore[no-untyped-def]
    assert not connection.in_atomic_block  # transactional_db: every enqueue below commits
    for n in range(6):
        enqueue("t_record", {"n": n}, channel=f"tenant-{n % 3}")
    enqueue("t_fail", {}, channel="tenant-0", max_attempts=1)
    stats = lonnymq_drain("t_record", "t_fail", concurrency=2)
    assert (stats.acked, stats.dead) == (6, 1)
    assert sorted(deliveries()) == sorted(
        [(f"tenant-{n % 3}", "done") for n in range(6)] + [("tenant-0", "fail")]
    )
    assert lonnymq_drain().fetched == 0  # nothing left in any queue


@pytest.mark.django_db
def test_lonnymq_enqueued_lists_and_asserts(lonnymq_enqueued: Enqueued) -> None:
    first = enqueue("emails", {"kind": "welcome", "user": 1}, channel="acme")
    second = enqueue("emails", {"kind": "welcome", "user": 2}, channel="globex")
    assert [m.id for m in lonnymq_enqueued("emails")] == [first, second]
    assert [m.id for m in lonnymq_enqueued("emails", channel="globex")] == [second]
    assert lonnymq_enqueued.payloads("emails") == [
        {"kind": "welcome", "user": 1},
        {"kind": "welcome", "user": 2},
    ]
    (only,) = lonnymq_enqueued.assert_enqueued("emails", payload={"user": 2}, count=1)
    assert only.id == second and only.channel.name == "globex"
    assert len(lonnymq_enqueued.assert_enqueued("emails", payload={"kind": "welcome"})) == 2
    with pytest.raises(AssertionError, match="expected 3 message"):
        lonnymq_enqueued.assert_enqueued("emails", count=3)
    with pytest.raises(AssertionError, match="no message matching"):
        lonnymq_enqueued.assert_enqueued("emails", payload={"kind": "invoice"})
    lonnymq_enqueued.assert_nothing_enqueued("invoices")
    with pytest.raises(AssertionError, match="expected no message in 'emails', found 2"):
        lonnymq_enqueued.assert_nothing_enqueued("emails")
