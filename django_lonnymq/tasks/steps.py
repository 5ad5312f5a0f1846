"""A Django Task as a workflow step: its message, payload and result row, written with the
workflow."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.utils import timezone

from .. import arguments
from ..conf import settings as lonnymq_settings
from ..exceptions import (
    UnknownTask,
    WorkflowCancelled,
)
from .backend import LonnyMQBackend, _module_path, _new_id
from .context import _channel
from .discovery import find_task
from .framework import InvalidTask, InvalidTaskBackend, task_backends


@dataclasses.dataclass(frozen=True)
class StepTask:
    """A Django Task as a workflow step (``Workflow.step(task, args=..., kwargs=...)``): its
    queue, channel, message payload and attempts, and the result row to write with it."""

    queue: str
    channel: str
    payload: dict[str, Any]
    max_attempts: int
    record: dict[str, Any]
    database: str  # the task queue's database alias (the backend's DATABASE, or the queue's)


def step_task(
    task: Any,
    args: Any,
    kwargs: Any,
    *,
    channel: str | None,
    workflow_channel: str | None,
    max_attempts: int | None,
    using: str | None,
) -> StepTask:
    """Check a task given as a workflow step and build its message; every refusal is an
    :class:`~django_lonnymq.exceptions.InvalidArgument` naming the field (nothing written).
    The channel: ``channel``, else the :func:`channel` block or the ``CHANNEL_KWARG``
    argument, else the workflow's, else the backend's ``DEFAULT_CHANNEL``."""
    from ..exceptions import InvalidArgument

    path = getattr(task, "module_path", repr(task))
    alias = task.backend
    try:
        backend = task_backends[alias]
    except InvalidTaskBackend:
        backend = None
    if not isinstance(backend, LonnyMQBackend):
        raise InvalidArgument("backend", "must be a LonnyMQBackend in TASKS (a workflow step runs on the queue)",
                              f"{path} on {alias!r}")  # fmt: skip
    queue_name = arguments.queue(task.queue_name, "queue_name")
    if backend.queues and queue_name not in backend.queues:
        raise InvalidArgument(
            "queue_name", f"must be one of the QUEUES of task backend {alias!r} ({', '.join(sorted(backend.queues))})",
            queue_name,
        )  # fmt: skip
    if task.priority != 0:
        raise InvalidArgument("priority", "must be 0 for a task run as a workflow step (steps have no priority)",
                              task.priority)  # fmt: skip
    if task.run_after is not None:
        raise InvalidArgument("run_after", "must not be set for a workflow step (give the step a delay)",
                              task.run_after)  # fmt: skip
    try:
        backend.validate_task(task)
    except InvalidTask as exc:
        raise InvalidArgument("task", str(exc), path) from exc
    try:
        find_task(path, backend)
    except UnknownTask as exc:
        raise InvalidArgument("task", "must be a @task of an installed app's tasks module or OPTIONS['TASK_MODULES']",
                              path) from exc  # fmt: skip
    database = backend.database_for(queue_name)
    if using is not None and database != using:
        raise InvalidArgument("using", f"must be the database of task queue {queue_name!r}",
                              f"{using!r}, not {database!r}")  # fmt: skip
    if isinstance(args, (str, bytes, dict)) or not isinstance(args, (list, tuple)):
        raise InvalidArgument("args", "must be a list or a tuple", type(args).__name__)
    if not isinstance(kwargs, dict):
        raise InvalidArgument("kwargs", "must be a dict", type(kwargs).__name__)
    chosen = channel or _channel.get()
    if chosen is None and backend.channel_kwarg and backend.channel_kwarg in kwargs:
        chosen = str(kwargs[backend.channel_kwarg])
    chosen = arguments.channel(chosen or workflow_channel or backend.default_channel)
    result_id = _new_id()
    payload = {
        "task": path,
        "result_id": result_id,
        "backend": alias,
        "args": list(args),
        "kwargs": dict(kwargs),
    }
    if max_attempts is None:
        max_attempts = lonnymq_settings.MAX_ATTEMPTS if backend.max_attempts is None else backend.max_attempts
    record = {
        "id": result_id,
        "backend": alias,
        "task_path": path,
        "queue": queue_name,
        "channel": chosen,
        "status": "READY",
        "args": list(args),
        "kwargs": dict(kwargs),
    }
    return StepTask(queue_name, chosen, payload, max_attempts, record, database)


def write_step_results(records: list[dict[str, Any]], using: str) -> None:
    """The result rows of a workflow's task steps (``message_id``: the step's id), written
    in the transaction that starts the workflow."""
    from ..models import TaskResultRecord

    now = timezone.now()
    TaskResultRecord.objects.using(using).bulk_create(TaskResultRecord(**r, enqueued_at=now) for r in records)


def end_cancelled_step_results(result_ids: list[str], using: str) -> int:
    """The results of task steps cancelled before they ran (still ``READY``) end ``FAILED``,
    with a :class:`~django_lonnymq.exceptions.WorkflowCancelled` error: they will never run."""
    from ..models import TaskResultRecord

    now = timezone.now()
    error = {
        "exception_class_path": _module_path(WorkflowCancelled),
        "traceback": "django_lonnymq.exceptions.WorkflowCancelled: the workflow was cancelled before this step ran\n",
    }
    ended = 0
    for record in TaskResultRecord.objects.using(using).filter(id__in=result_ids, status="READY"):
        ended += (
            TaskResultRecord.objects.using(using)
            .filter(id=record.id, status="READY")
            .update(status="FAILED", finished_at=now, errors=[*record.errors, error])
        )
    return ended
