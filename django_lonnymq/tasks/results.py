"""A stored result row as the framework's ``TaskResult``, and the ``Task`` it names (or a
stand-in when its task cannot be loaded)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..exceptions import (
    UnknownTask,
)
from .framework import Task, TaskError, TaskResult, TaskResultStatus


def _as_enqueued(task: Task, record: Any) -> Task:
    """The task with the priority, queue and run_after it was enqueued with (when still valid)."""
    try:
        return task.using(priority=record.priority, queue_name=record.queue, run_after=record.run_after)
    except Exception:  # settings changed since (a queue left QUEUES): the task as declared
        return task


def _result_from_record(record: Any, task: Task) -> TaskResult:
    result: Any = TaskResult(
        task=task,
        id=record.id,
        status=TaskResultStatus(record.status),
        enqueued_at=record.enqueued_at,
        started_at=record.started_at,
        last_attempted_at=record.last_attempted_at,
        finished_at=record.finished_at,
        args=record.args,
        kwargs=record.kwargs,
        backend=record.backend,
        errors=[
            TaskError(exception_class_path=e["exception_class_path"], traceback=e["traceback"])
            for e in record.errors
        ],
        worker_ids=list(record.worker_ids),
    )
    object.__setattr__(result, "_return_value", record.return_value)
    return result


def _stand_in_task(path: str, alias: str, queue_name: str, priority: int) -> Task:
    """A ``Task`` whose ``module_path`` is ``path``, for the signals of a message whose path
    or backend cannot be loaded. Built without the framework's validation (which needs a
    configured backend); calling it raises :class:`UnknownTask`."""
    module, _, name = path.rpartition(".")

    def missing(*args: Any, **kwargs: Any) -> Any:
        raise UnknownTask(f"{path!r} is not a @task this project has")

    missing.__module__ = module
    missing.__qualname__ = missing.__name__ = name or path
    values = {
        "func": missing,
        "priority": priority,
        "backend": alias,
        "queue_name": queue_name,
        "run_after": None,
        "takes_context": False,
    }
    stand_in = object.__new__(Task)
    for spec in dataclasses.fields(Task):
        if spec.name in values:
            value = values[spec.name]
        elif spec.default_factory is not dataclasses.MISSING:
            value = spec.default_factory()
        else:
            value = None if spec.default is dataclasses.MISSING else spec.default
        object.__setattr__(stand_in, spec.name, value)
    return stand_in
