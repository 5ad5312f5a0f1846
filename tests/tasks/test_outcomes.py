"""Every way out of a task run ends in a final result state, with its error and the signals."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.test import override_settings
from django.utils import timezone

from django_lonnymq import api
from django_lonnymq.models import DeadMessage, Message, TaskResultRecord
from django_lonnymq.registry import autodiscover
from django_lonnymq.tasks import LonnyMQBackend, TaskResultDoesNotExist
from django_lonnymq.worker import Worker
from tests.testapp import tasks

try:
    from django.tasks import TaskResultStatus, default_task_backend, task_backends
    from django.tasks.signals import task_finished, task_started
except ImportError:
    from django_tasks import TaskResultStatus, default_task_backend, task_backends
    from django_tasks.signals import task_finished, task_started

pytestmark = pytest.mark.django_db(transaction=True)

# MAX_ATTEMPTS is 2 in tests/settings.py; these make the second attempt come at once.
FAST_RETRY = {"LONNYMQ_RETRY_BACKOFF_BASE": 0.01, "LONNYMQ_RETRY_BACKOFF_MAX": 0.02}


@pytest.fixture(autouse=True)
def _handlers(recording: None) -> None:
    autodiscover()


@pytest.fixture
def signals() -> Iterator[list[tuple[str, type, str, str]]]:
    """(signal, sender, task path, status) of every task_started / task_finished sent."""
    seen: list[tuple[str, type, str, str]] = []

    def on_started(sender: type, task_result: Any, **kwargs: Any) -> None:
        seen.append(("started", sender, task_result.task.module_path, str(task_result.status)))

    def on_finished(sender: type, task_result: Any, **kwargs: Any) -> None:
        seen.append(("finished", sender, task_result.task.module_path, str(task_result.status)))

    task_started.connect(on_started, weak=False)
    task_finished.connect(on_finished, weak=False)
    yield seen
    task_started.disconnect(on_started)
    task_finished.disconnect(on_finished)


def drain(*queues: str) -> None:
    Worker(list(queues) or ["default"], concurrency=1, burst=True, shutdown_timeout=5).run()


def drain_all_attempts() -> None:
    with override_settings(**FAST_RETRY):
        for _ in range(100):
            drain()
            if not Message.objects.exists():
                return
    pytest.fail("messages still queued after 100 drains")


def forge(task_path: str, backend: str = "default", *, row: bool = True) -> str:
    """A task message (and its result row) as an older deploy or a hand-written enqueue left it."""
    result_id = str(uuid.uuid4())
    message_id = api.enqueue(
        "default",
        {"task": task_path, "result_id": result_id, "backend": backend, "args": [], "kwargs": {}},
        max_attempts=2,
    )
    if row:
        TaskResultRecord.objects.create(
            id=result_id,
            backend=backend,
            task_path=task_path,
            queue="default",
            channel="default",
            message_id=message_id,
            status="READY",
        )
    return result_id


def test_success_sends_started_then_finished(signals: list[tuple[str, type, str, str]]) -> None:
    result = tasks.add.enqueue(1, 2)
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3
    path = tasks.add.module_path
    assert signals == [
        ("started", LonnyMQBackend, path, "RUNNING"),
        ("finished", LonnyMQBackend, path, "SUCCESSFUL"),
    ]


def test_return_value_not_storable_fails_with_the_type_error(signals: list[tuple[str, type, str, str]]) -> None:
    result = tasks.returns_set.enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.finished_at is not None
    [error] = result.errors
    assert error.exception_class_path == "builtins.TypeError"
    assert "set is not JSON serializable" in error.traceback
    assert error.exception_class is TypeError
    assert [s[0] + ":" + s[3] for s in signals] == ["started:RUNNING", "finished:FAILED"]
    # Not retried: the task ran once and would return the same again.
    dead = DeadMessage.objects.get()
    assert dead.attempts == 1 and "cannot be stored" in (dead.last_error or "")
    assert not Message.objects.exists()


@pytest.mark.parametrize(
    ("task", "exception_path"),
    [(tasks.exits, "builtins.SystemExit"), (tasks.interrupts, "builtins.KeyboardInterrupt")],
    ids=["SystemExit", "KeyboardInterrupt"],
)
def test_base_exceptions_fail_the_result_after_the_last_attempt(
    task: Any, exception_path: str, signals: list[tuple[str, type, str, str]]
) -> None:
    result = task.enqueue()
    drain()
    result.refresh()
    # The first of two attempts failed: the result waits for the retry, with its error.
    assert result.status == TaskResultStatus.READY and result.finished_at is None
    assert [e.exception_class_path for e in result.errors] == [exception_path]
    assert [s[0] for s in signals] == ["started"]
    drain_all_attempts()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.finished_at is not None
    assert [e.exception_class_path for e in result.errors] == [exception_path, exception_path]
    assert [s[0] + ":" + s[3] for s in signals] == ["started:RUNNING", "started:RUNNING", "finished:FAILED"]
    assert DeadMessage.objects.get().attempts == 2


@pytest.mark.parametrize(
    "path", ["tests.testapp.tasks.not_a_task", "tests.testapp.gone.renamed"], ids=["not-a-task", "missing"]
)
def test_path_that_is_not_a_task_fails_at_once_and_never_runs(
    path: str, signals: list[tuple[str, type, str, str]]
) -> None:
    result_id = forge(path)
    drain()
    record = TaskResultRecord.objects.get(id=result_id)
    assert record.status == "FAILED" and record.finished_at is not None and record.started_at is not None
    [error] = record.errors
    assert error["exception_class_path"] == "django_lonnymq.exceptions.UnknownTask"
    assert path in error["traceback"]
    assert signals == [
        ("started", LonnyMQBackend, path, "RUNNING"),
        ("finished", LonnyMQBackend, path, "FAILED"),
    ]
    dead = DeadMessage.objects.get()
    assert dead.attempts == 1 and "is not a @task" in (dead.last_error or "")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM testapp_delivery WHERE event = 'not_a_task ran'")
        assert cursor.fetchone()[0] == 0
    # get_result raises the framework's own exception, naming why.
    with pytest.raises(TaskResultDoesNotExist, match="cannot be loaded"):
        default_task_backend.get_result(result_id)


def test_unknown_backend_alias_fails_at_once(signals: list[tuple[str, type, str, str]]) -> None:
    result_id = forge(tasks.add.module_path, backend="renamed")
    drain()
    record = TaskResultRecord.objects.get(id=result_id)
    assert record.status == "FAILED" and record.finished_at is not None
    [error] = record.errors
    assert error["exception_class_path"] == "django_lonnymq.exceptions.UnknownTask"
    assert "'renamed' is not a LonnyMQBackend" in error["traceback"]
    assert [(s[0], s[1], s[3]) for s in signals] == [
        ("started", LonnyMQBackend, "RUNNING"),
        ("finished", LonnyMQBackend, "FAILED"),
    ]
    dead = DeadMessage.objects.get()
    assert dead.attempts == 1 and "'renamed'" in (dead.last_error or "")


def test_forged_message_cannot_touch_another_tasks_result() -> None:
    """A message is matched to its result row by id, backend and path together."""
    real = tasks.add.enqueue(1, 1)
    api.enqueue(
        "default",
        {"task": "tests.testapp.tasks.explode", "result_id": real.id, "backend": "default", "args": [], "kwargs": {}},
        max_attempts=1,
    )
    drain_all_attempts()
    real.refresh()
    assert real.status == TaskResultStatus.SUCCESSFUL and real.return_value == 2 and real.errors == []


def test_task_started_receiver_that_raises_fails_the_attempt() -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("receiver broke")

    task_started.connect(broken, weak=False)
    try:
        result = tasks.add.using(priority=0).enqueue(1, 1)
        drain_all_attempts()
    finally:
        task_started.disconnect(broken)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == ["builtins.RuntimeError"] * 2


@pytest.mark.parametrize("raised", [RuntimeError, SystemExit, asyncio.CancelledError, KeyboardInterrupt])
def test_task_finished_receiver_that_raises_does_not_run_the_task_again(
    caplog: pytest.LogCaptureFixture, raised: type[BaseException]
) -> None:
    def broken(**kwargs: Any) -> None:
        raise raised("receiver broke")

    task_finished.connect(broken, weak=False)
    try:
        result = tasks.note.enqueue("once")
        drain("tasks_other")
    finally:
        task_finished.disconnect(broken)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.attempts == 1
    assert not Message.objects.exists() and not DeadMessage.objects.exists()
    assert "task_finished receiver" in caplog.text
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM testapp_delivery WHERE event = 'task'")
        assert cursor.fetchone()[0] == 1


def test_get_result_raises_the_frameworks_exceptions() -> None:
    backend = task_backends["default"]
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(str(uuid.uuid4()))
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(12345)  # type: ignore[arg-type]
    result = tasks.add.enqueue(2, 2)
    # The same id under another backend alias is not this backend's result.
    TaskResultRecord.objects.filter(id=result.id).update(backend="other")
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(result.id)


def test_get_result_keeps_the_enqueued_priority_and_queue() -> None:
    later = timezone.now() + timedelta(days=1)
    result = tasks.add.using(run_after=later).enqueue(1, 1)
    high = tasks.add.using(priority=30).enqueue(1, 1)
    fetched = task_backends["default"].get_result(result.id)
    assert fetched.task.run_after == later
    assert task_backends["default"].get_result(high.id).task.priority == 30


def test_aenqueue_and_aget_result() -> None:
    async def scenario() -> Any:
        try:
            result = await tasks.add.aenqueue(4, 5)
            return await task_backends["default"].aget_result(result.id)
        finally:  # the connection of the thread sync_to_async ran them on
            await sync_to_async(connections.close_all)()

    fetched = asyncio.run(scenario())
    assert fetched.status == TaskResultStatus.READY and fetched.args == [4, 5]
    drain()
    fetched.refresh()
    assert fetched.return_value == 9
