"""A Django Task on a schedule: ``@periodic`` on a task of the LonnyMQ backend enqueues a task
message per tick into the task's queue, and the worker runs the task."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from django_lonnymq import periodic, schedules
from django_lonnymq.models import Schedule
from django_lonnymq.registry import autodiscover
from django_lonnymq.tasks import InvalidTask
from django_lonnymq.worker import Worker
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _handlers(recording: None) -> Iterator[None]:
    autodiscover()
    yield
    for declaration in schedules.declarations():
        if declaration.name.startswith("task-"):
            schedules.forget(declaration.name)


def test_a_task_runs_on_a_schedule(connect):
    # An hour apart: the tick after the one made due below is never due while the test runs
    # (ticks sit on a grid, so a 10 s interval could fall due again a moment later).
    periodic(every=3600, name="task-note", payload={"text": "tick", "tenant_id": "t1"})(tasks.note)
    conn = connect()
    schedules.sync(conn, [d for d in schedules.declarations() if d.name == "task-note"])
    row = Schedule.objects.get(name="task-note")
    assert row.queue == "tasks_other" and row.payload["task"] == tasks.note.module_path
    past_tick = row.next_tick_at - 3_600_000  # a tick that is due now
    Schedule.objects.filter(pk=row.pk).update(next_tick_at=past_tick)
    assert schedules.tick(conn, ["tasks_other"]) == 1
    Worker(["tasks_other"], burst=True, shutdown_timeout=5).run()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT payload #>> '{}' FROM testapp_delivery WHERE event = 'task' AND channel = 't1'"
        )
        assert cursor.fetchall() == [("tick",)]


def test_a_task_schedule_with_bad_arguments_is_refused_at_declaration():
    with pytest.raises(InvalidTask, match="keyword arguments"):
        periodic(every=10, name="task-bad", payload=["not", "kwargs"])(tasks.note)
    with pytest.raises(Exception, match="queue"):
        periodic(every=10, name="task-other-queue", queue="elsewhere")(tasks.note)
    assert not [d for d in schedules.declarations() if d.name.startswith("task-")]
