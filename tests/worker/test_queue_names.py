"""A misspelled ``--queue`` with a Django Tasks backend that accepts any queue name
(``"QUEUES": []``): the worker starts (a new task queue may be empty at first) but warns that
the queue has no handler of its own and never received a message, naming near misses."""

from __future__ import annotations

from typing import Any

from django_lonnymq import api
from tests.worker.conftest import describe

OPEN_QUEUES = "tests.worker.settings_open_task_queues"


def test_a_misspelled_queue_is_named_with_its_near_miss(spawn: Any, db: Any) -> None:
    api.enqueue("t_transcode", {"n": 1})  # a queue the database holds
    worker = spawn("--queue", "t_transcod", "--burst", settings=OPEN_QUEUES)
    assert worker.wait(timeout=30) == 0, describe(worker)
    assert "warning: queue 't_transcod' has no handler of its own" in worker.output, describe(worker)
    assert "Did you mean 't_transcode'" in worker.output, describe(worker)


def test_a_queue_that_received_messages_or_has_a_handler_is_not_warned_about(spawn: Any, db: Any) -> None:
    api.enqueue("t_open_tasks", {"n": 1})  # a task queue in use: a channel exists
    worker = spawn("--queue", "t_open_tasks", "--queue", "t_record", "--queue", "default", "--burst",
                   settings=OPEN_QUEUES)  # fmt: skip
    assert worker.wait(timeout=30) == 0, describe(worker)
    assert "warning: queue" not in worker.output, describe(worker)
