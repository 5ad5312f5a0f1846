"""An ``async def`` Django Task: accepted by the backend and run by the real worker."""

from __future__ import annotations

import pytest

from django_lonnymq.registry import autodiscover
from django_lonnymq.tasks import LonnyMQBackend
from django_lonnymq.worker import Worker
from tests.testapp import tasks

try:
    from django.tasks import TaskResultStatus, task_backends
except ImportError:
    from django_tasks import TaskResultStatus, task_backends

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_backend_supports_async_tasks() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, LonnyMQBackend) and backend.supports_async_task
    backend.validate_task(tasks.add_later)  # would raise InvalidTask without support


def test_an_async_task_runs_on_the_worker(recording: None) -> None:
    autodiscover()
    result = tasks.add_later.enqueue(2, 5)
    Worker(["default"], burst=True, shutdown_timeout=5).run()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 7
