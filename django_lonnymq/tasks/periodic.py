"""``@periodic`` on a task: the queue and payload a schedule enqueues to run it."""

from __future__ import annotations

from typing import Any

from .backend import LonnyMQBackend
from .framework import InvalidTask, Task, task_backends


def periodic_message(task: Task, kwargs: Any) -> tuple[str, dict[str, Any]]:
    """The queue and payload a periodic schedule enqueues to run ``task`` (``@periodic`` on a
    task): a task message with ``kwargs`` and no stored result (each run's result lives in
    memory only; ``get_result`` does not know it)."""
    if not isinstance(kwargs, dict):
        raise InvalidTask(f"the payload of a periodic task is its keyword arguments: a dict, got {kwargs!r}")
    backend = task_backends[task.backend]
    if not isinstance(backend, LonnyMQBackend):
        raise InvalidTask(f"task {task.module_path} runs on backend {task.backend!r}, not a LonnyMQBackend")
    backend.validate_task(task)
    payload = {
        "task": task.module_path,
        "result_id": f"periodic:{task.module_path}",
        "backend": backend.alias,
        "args": [],
        "kwargs": kwargs,
    }
    return task.queue_name, payload
