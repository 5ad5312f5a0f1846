"""A task's message and its result row are written by one SQL call (lonnymq_enqueue_task_v1)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_lonnymq import db, sql
from django_lonnymq.conf import enqueue_params
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.models import Message, TaskResultRecord
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_enqueue_is_one_statement() -> None:
    connection.ensure_connection()
    with CaptureQueriesContext(connection) as queries:
        result = tasks.note.using(priority=5).enqueue("hi", tenant_id="acme")
    assert len(queries.captured_queries) == 1, [q["sql"] for q in queries.captured_queries]
    assert "lonnymq_enqueue_task_v1" in queries.captured_queries[0]["sql"]
    row = TaskResultRecord.objects.get(id=result.id)
    message = Message.objects.get()
    assert row.message_id == message.id and row.status == "READY"
    assert (row.backend, row.task_path, row.queue, row.channel) == ("default", tasks.note.module_path, "tasks_other", "acme")
    assert (row.args, row.kwargs, row.priority) == (["hi"], {"tenant_id": "acme"}, 5)
    assert row.enqueued_at == result.enqueued_at
    assert message.payload == {
        "task": tasks.note.module_path,
        "result_id": result.id,
        "backend": "default",
        "args": ["hi"],
        "kwargs": {"tenant_id": "acme"},
    }
    assert message.max_attempts == 2 and message.priority == 5


def test_deferred_task_keeps_run_after_on_its_row() -> None:
    later = timezone.now() + timedelta(hours=1)
    result = tasks.add.using(run_after=later).enqueue(1, 2)
    assert TaskResultRecord.objects.get(id=result.id).run_after == later
    assert Message.objects.get().dequeue_at >= int(later.timestamp() * 1000) - 1


def call(payload: Any, **overrides: Any) -> int:
    params = {
        "queue": "default",
        "channel": "default",
        "payload": payload,
        "run_at_ms": None,
        "priority": 0,
        "max_attempts": 3,
        "run_after": None,
        "enqueued_at": timezone.now(),
        **enqueue_params(),
        **overrides,
    }
    return int(db.value("enqueue_task", params))


GOOD = '{"task": "tests.testapp.tasks.add", "result_id": "r1", "backend": "default", "args": [1, 2], "kwargs": {}}'


@pytest.mark.parametrize(
    ("payload", "overrides", "field"),
    [
        ("[1, 2]", {}, "payload"),
        ('{"task": "t", "backend": "default", "args": [], "kwargs": {}}', {}, "payload.result_id"),
        ('{"task": "t", "result_id": 7, "backend": "default", "args": [], "kwargs": {}}', {}, "payload.result_id"),
        ('{"task": "", "result_id": "r", "backend": "default", "args": [], "kwargs": {}}', {}, "payload.task"),
        ('{"task": "t", "result_id": "r", "args": [], "kwargs": {}}', {}, "payload.backend"),
        ('{"task": "t", "result_id": "r", "backend": "default", "args": {}, "kwargs": {}}', {}, "payload.args"),
        ('{"task": "t", "result_id": "r", "backend": "default", "args": [], "kwargs": []}', {}, "payload.kwargs"),
        (GOOD, {"enqueued_at": None}, "enqueued_at"),
        (GOOD, {"max_attempts": 0}, "max_attempts"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(payload: str, overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        call(payload, **overrides)
    assert caught.value.field == field
    assert not Message.objects.exists() and not TaskResultRecord.objects.exists()


def test_a_repeated_result_id_writes_neither_row() -> None:
    first = call(GOOD)
    with pytest.raises(IntegrityError):
        call(GOOD)
    assert list(Message.objects.values_list("id", flat=True)) == [first]
    assert TaskResultRecord.objects.get().message_id == first


def test_named_query_casts_every_argument() -> None:
    statement = sql.query("enqueue_task")
    assert statement.count("%(") == statement.count(")s::")
