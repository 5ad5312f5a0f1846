"""The Django Tasks framework as this backend sees it: ``django.tasks`` on Django 6, the
``django-tasks`` backport on 5.2 (chosen at import), and its exceptions under either name."""

from __future__ import annotations

import logging

try:  # Django 6
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks import exceptions as _task_exceptions
    from django.tasks import signals as _task_signals
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import DEFAULT_TASK_BACKEND_ALIAS, DEFAULT_TASK_QUEUE_NAME, Task, TaskError
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends  # type: ignore[no-redef,assignment]
    from django_tasks import exceptions as _task_exceptions  # type: ignore[no-redef,assignment]
    from django_tasks import signals as _task_signals  # type: ignore[no-redef,assignment]
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef,assignment]
    from django_tasks.base import (  # type: ignore[no-redef,assignment]
        DEFAULT_TASK_BACKEND_ALIAS,
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskError,
    )

__all__ = [
    "BaseTaskBackend",
    "DEFAULT_TASK_BACKEND_ALIAS",
    "DEFAULT_TASK_QUEUE_NAME",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultStatus",
    "_task_exceptions",
    "_task_signals",
    "task_backends",
]  # the framework, for the modules beside


def _framework_exception(*names: str) -> type[Exception]:
    """The framework's exception class under its Django 6 or its backport name."""
    return next(getattr(_task_exceptions, name) for name in names if hasattr(_task_exceptions, name))


InvalidTask = _framework_exception("InvalidTask", "InvalidTaskError")


InvalidTaskBackend = _framework_exception("InvalidTaskBackend", "InvalidTaskBackendError")


TaskResultDoesNotExist: type[Exception] = _task_exceptions.TaskResultDoesNotExist


logger = logging.getLogger("django_lonnymq.tasks")
