"""The Django Tasks backend: enqueue through the task API, run on the real worker."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from django_lonnymq.models import DeadMessage, Message, TaskResultRecord
from django_lonnymq.registry import autodiscover
from django_lonnymq.tasks import InvalidTask, LonnyMQBackend, channel
from django_lonnymq.worker import Worker
from tests.testapp import tasks

try:
    from django.tasks import TaskResultStatus, task_backends
except ImportError:
    from django_tasks import TaskResultStatus, task_backends

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _handlers(recording: None) -> None:
    autodiscover()


def drain(*queues: str) -> None:
    Worker(list(queues) or ["default"], concurrency=2, burst=True, shutdown_timeout=5).run()


def test_backend_is_configured() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, LonnyMQBackend)
    assert backend.supports_defer and backend.supports_get_result and backend.supports_priority


def test_enqueue_runs_on_worker_and_stores_result() -> None:
    result = tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert Message.objects.count() == 1
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert len(result.worker_ids) == 1
    fetched = task_backends["default"].get_result(result.id)
    assert fetched.return_value == 5 and fetched.finished_at is not None
    assert Message.objects.count() == 0


def test_rollback_leaves_nothing() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.enqueue(1, 1)
        raise RuntimeError("request failed")
    assert Message.objects.count() == 0
    assert TaskResultRecord.objects.count() == 0


def test_commit_keeps_message_and_result() -> None:
    with transaction.atomic():
        result = tasks.add.enqueue(1, 1)
    assert Message.objects.count() == 1
    assert TaskResultRecord.objects.get(id=result.id).status == "READY"


def test_channel_from_kwarg_and_context_manager() -> None:
    tasks.note.enqueue("hello", tenant_id="acme")
    with channel("globex"):
        tasks.note.enqueue("world")
    names = sorted(Message.objects.values_list("channel__name", flat=True))
    assert names == ["acme", "globex"]
    drain("tasks_other")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM testapp_delivery WHERE event = 'task'")
        assert cursor.fetchone()[0] == 2


def test_deferred_task_waits_for_run_after() -> None:
    later = timezone.now() + timedelta(seconds=60)
    result = tasks.add.using(run_after=later).enqueue(1, 2)
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.READY
    message = Message.objects.get()
    assert message.dequeue_at >= int(later.timestamp() * 1000) - 1


def test_priority_orders_within_channel() -> None:
    low = tasks.add.enqueue(0, 1)
    high = tasks.add.using(priority=50).enqueue(0, 2)
    first = Message.objects.order_by("dequeue_at", "id").first()
    assert first is not None and first.payload["result_id"] == high.id
    assert low.id != high.id


def test_negative_priority_refused() -> None:
    with pytest.raises(InvalidTask, match="only moves work earlier"):
        tasks.add.using(priority=-10).enqueue(1, 1)
    assert Message.objects.count() == 0


def test_framework_validation_still_applies() -> None:
    with pytest.raises(InvalidTask):
        tasks.add.using(queue_name="not-configured").enqueue(1, 1)
    with pytest.raises(InvalidTask):
        tasks.add.using(priority=101).enqueue(1, 1)
    assert Message.objects.count() == 0


def test_failure_retries_then_dead_letter() -> None:
    result = tasks.explode.enqueue(3)
    with override_settings(LONNYMQ_RETRY_BACKOFF_BASE=0.01, LONNYMQ_RETRY_BACKOFF_MAX=0.02):
        for _ in range(50):
            drain()
            if DeadMessage.objects.exists():
                break
    dead = DeadMessage.objects.get()
    assert dead.attempts == 2 and "exploded 3" in (dead.last_error or "")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 2
    assert result.errors[-1].exception_class_path.endswith("ValueError")


def test_context_sees_attempt() -> None:
    result = tasks.attempt_number.enqueue()
    drain()
    result.refresh()
    assert result.return_value == 1


def test_a_task_that_snoozes_waits_without_spending_an_attempt() -> None:
    import time

    result = tasks.snooze_then_add.enqueue("snooze-test", 2, 3)
    for _ in range(200):
        drain()
        result.refresh()
        if result.status == TaskResultStatus.SUCCESSFUL:
            break
        time.sleep(0.01)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.errors == []
    assert DeadMessage.objects.count() == 0
