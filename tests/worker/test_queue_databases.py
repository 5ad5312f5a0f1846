"""``run_queue_worker`` serving queues on two databases (``LONNYMQ_QUEUE_DATABASES``): one
process, one control connection (and LISTEN) per database, every queue drained."""

from __future__ import annotations

import signal
import time

import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from django_lonnymq import enqueue_many
from tests.conftest import worker_env

BOTH = ["default", "other"]
pytestmark = pytest.mark.django_db(databases=BOTH, transaction=True)
# As in tests/worker/settings_multidb.py, the workers' settings.
MAPPING = {"t_noop": "other", "t_sleep": "other"}


@pytest.fixture(autouse=True)
def mapped(settings):
    settings.LONNYMQ_QUEUE_DATABASES = MAPPING


def url(alias: str) -> str:
    s = connections[alias].settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def env() -> dict[str, str]:
    return worker_env(
        DJANGO_SETTINGS_MODULE="tests.worker.settings_multidb", OTHER_DATABASE_URL=url("other")
    )


def done_counts() -> list[tuple[str, int]]:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT queue, count(*) FROM testapp_delivery WHERE event = 'done' GROUP BY queue ORDER BY 1"
        )
        return [(queue, int(n)) for queue, n in cursor.fetchall()]


def left(alias: str, queue: str) -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id WHERE c.queue = %s",
            [queue],
        )
        return int(cursor.fetchone()[0])


def worker_connections(name: str) -> list[str]:
    """The databases where a control connection of the worker ``name`` is open now."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT datname FROM pg_stat_activity WHERE application_name = %s ORDER BY 1",
            [f"lonnymq-worker {name}"],
        )
        return [row[0] for row in cursor.fetchall()]


def test_one_burst_worker_drains_queues_on_both_databases(start_worker, recording):
    enqueue_many("t_record", [{"n": i} for i in range(20)], channel="a")
    enqueue_many("t_sleep", [{"n": i, "seconds": 0} for i in range(20)], channel="b")
    assert left("other", "t_sleep") == 20 and left("default", "t_record") == 20

    proc = start_worker(
        "--queue", "t_record", "--queue", "t_sleep", "--burst", "--concurrency", "2", env=env()
    )
    out, _ = proc.communicate(timeout=180)

    assert proc.returncode == 0, out
    assert "databases=default:t_record;other:t_sleep" in out, out
    assert "acked=40" in out, out
    assert done_counts() == [("t_record", 20), ("t_sleep", 20)]
    assert left("other", "t_sleep") == 0 and left("default", "t_record") == 0


def test_a_running_worker_holds_one_connection_per_database_and_is_woken_on_each(start_worker, recording):
    proc = start_worker(
        "--queue", "t_record", "--queue", "t_sleep", "--name", "multidb-acceptance", env=env()
    )
    names = sorted(connections[alias].settings_dict["NAME"] for alias in BOTH)
    deadline = time.monotonic() + 60
    while worker_connections("multidb-acceptance") != names:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        assert time.monotonic() < deadline, worker_connections("multidb-acceptance")
        time.sleep(0.2)

    enqueue_many("t_sleep", [{"n": i, "seconds": 0} for i in range(5)], channel="b")
    enqueue_many("t_record", [{"n": i} for i in range(5)], channel="a")
    deadline = time.monotonic() + 60
    while done_counts() != [("t_record", 5), ("t_sleep", 5)]:
        assert time.monotonic() < deadline, done_counts()
        time.sleep(0.1)

    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "acked=10" in out, out


def test_max_messages_with_queues_on_several_databases_is_refused():
    with pytest.raises(CommandError, match="max_messages.*several databases"):
        call_command("run_queue_worker", "--queue", "t_record", "--queue", "t_noop", "--max-messages", "3")
