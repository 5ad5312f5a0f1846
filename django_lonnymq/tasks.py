"""A Django Tasks backend: ``@task`` functions run on the fair queue.

Configure it in place of any other backend::

    TASKS = {
        "default": {
            "BACKEND": "django_lonnymq.tasks.LonnyMQBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"CHANNEL_KWARG": "tenant_id"},
        }
    }

Works with ``django.tasks`` (Django 6) and the ``django-tasks`` backport (Django 5.2); the
import is chosen at run time. Each task queue is a django-lonnymq queue; the tenant channel
comes from :func:`channel` (a context manager), the ``CHANNEL_KWARG`` option, or
``DEFAULT_CHANNEL``. Priority 0..100 maps onto the queue's priority; negative priorities
cannot be expressed (priority only moves work earlier) and are refused by ``validate_task``.
Results are stored in ``lonnymq_task_result``, apart from the queue's hot tables.

The worker runs a task message only if its path names a ``Task`` object found in an
installed app's ``tasks`` module (or a module in ``OPTIONS["TASK_MODULES"]``): a payload
can never make the worker import arbitrary code.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import traceback
from collections.abc import Iterator
from importlib import import_module
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from . import api
from .conf import settings as lonnymq_settings
from .exceptions import Discard, LonnyMQError
from .message import Message
from .registry import add_discovery_hook, register_default

try:  # Django 6
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks import exceptions as _task_exceptions
    from django.tasks import signals as _task_signals
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends  # type: ignore[no-redef,assignment]
    from django_tasks import exceptions as _task_exceptions  # type: ignore[no-redef,assignment]
    from django_tasks import signals as _task_signals  # type: ignore[no-redef,assignment]
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef,assignment]
    from django_tasks.base import Task, TaskError  # type: ignore[no-redef,assignment]

_INVALID_NAMES = ("InvalidTask", "InvalidTaskError")  # Django 6, the backport
InvalidTask: type[Exception] = next(
    getattr(_task_exceptions, name) for name in _INVALID_NAMES if hasattr(_task_exceptions, name)
)
TaskResultDoesNotExist: type[Exception] = _task_exceptions.TaskResultDoesNotExist

logger = logging.getLogger("django_lonnymq.tasks")

_channel: contextvars.ContextVar[str | None] = contextvars.ContextVar("lonnymq_task_channel", default=None)


@contextlib.contextmanager
def channel(name: str) -> Iterator[None]:
    """Enqueue the tasks of this block into tenant channel ``name``."""
    api._name("channel", name, 200)
    token = _channel.set(name)
    try:
        yield
    finally:
        _channel.reset(token)


def _module_path(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _new_id() -> str:
    import uuid

    return str(uuid.uuid4())


class LonnyMQBackend(BaseTaskBackend):
    """Runs Django Tasks on django-lonnymq: fair channels, limits, leases, retries."""

    supports_defer = True
    supports_async_task = False
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.default_channel: str = self.options.get("DEFAULT_CHANNEL", "default")
        self.channel_kwarg: str | None = self.options.get("CHANNEL_KWARG")
        self.database: str = self.options.get("DATABASE", lonnymq_settings.DATABASE)
        self.max_attempts: int | None = self.options.get("MAX_ATTEMPTS")
        self.task_modules: list[str] = list(self.options.get("TASK_MODULES", []))

    # -- validation --------------------------------------------------------------------

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        if task.priority < 0:
            raise InvalidTask(
                f"priority {task.priority} cannot be expressed by django-lonnymq: priority only moves "
                "work earlier (0..100); use 0 for normal work."
            )
        if task.priority > 0 and task.run_after is not None and task.run_after > timezone.now():
            raise InvalidTask("priority cannot be combined with run_after in the future.")
        for queue_name in [task.queue_name]:
            try:
                api._name("queue_name", queue_name, 100)
            except LonnyMQError as exc:
                raise InvalidTask(str(exc)) from exc

    # -- enqueue -----------------------------------------------------------------------

    def _channel_for(self, kwargs: dict[str, Any]) -> str:
        chosen = _channel.get()
        if chosen is None and self.channel_kwarg and self.channel_kwarg in kwargs:
            chosen = str(kwargs[self.channel_kwarg])
        return chosen or self.default_channel

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        result_id = _new_id()
        now = timezone.now()
        result: Any = TaskResult(
            task=task,
            id=result_id,
            status=TaskResultStatus.READY,
            enqueued_at=now,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        channel_name = self._channel_for(result.kwargs)
        payload = {
            "task": task.module_path,
            "result_id": result_id,
            "backend": self.alias,
            "args": result.args,
            "kwargs": result.kwargs,
        }
        run_after = task.run_after
        with transaction.atomic(using=self.database):
            message_id = api.enqueue(
                task.queue_name,
                payload,
                channel=channel_name,
                run_at=run_after if run_after is not None and run_after > now else None,
                priority=max(int(task.priority), 0),
                max_attempts=self.max_attempts,
                using=self.database,
            )
            from .models import TaskResultRecord

            TaskResultRecord.objects.using(self.database).create(
                id=result_id,
                backend=self.alias,
                task_path=task.module_path,
                queue=task.queue_name,
                channel=channel_name,
                message_id=message_id,
                status="READY",
                args=result.args,
                kwargs=result.kwargs,
                priority=task.priority,
                run_after=run_after,
                enqueued_at=now,
            )
        _task_signals.task_enqueued.send(type(self), task_result=result)
        return result

    # -- results -----------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        from .models import TaskResultRecord

        try:
            record = TaskResultRecord.objects.using(self.database).get(id=result_id, backend=self.alias)
        except TaskResultRecord.DoesNotExist:
            raise TaskResultDoesNotExist(result_id) from None
        task = find_task(record.task_path, self)
        return _result_from_record(record, task)

    def check(self, **kwargs: Any) -> list[Any]:
        from django.core.checks import Error

        if self.database not in connections.settings or connections[self.database].vendor != "postgresql":
            return [
                Error(
                    f"task backend {self.alias!r} needs a PostgreSQL database alias, got {self.database!r}",
                    hint="Set OPTIONS['DATABASE'] (or LONNYMQ_DATABASE) to a PostgreSQL alias in DATABASES.",
                    id="lonnymq.E005",
                )
            ]
        return []


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


# ---------------------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------------------

_known_tasks: dict[str, Task] | None = None


def _scan(module: Any, found: dict[str, Task]) -> None:
    for value in vars(module).values():
        if isinstance(value, Task):
            found[value.module_path] = value


def known_tasks(extra_modules: list[str] | None = None) -> dict[str, Task]:
    """Every ``Task`` object of the installed apps' ``tasks`` modules (and extra modules)."""
    global _known_tasks
    if _known_tasks is None or extra_modules:
        from django.apps import apps

        found: dict[str, Task] = dict(_known_tasks or {})
        for config in apps.get_app_configs():
            with contextlib.suppress(ModuleNotFoundError):
                module = import_module(f"{config.name}.tasks")
                _scan(module, found)
        for name in extra_modules or []:
            _scan(import_module(name), found)
        _known_tasks = found
    return _known_tasks


def find_task(path: str, backend: LonnyMQBackend | None = None) -> Task:
    """The registered ``Task`` at ``path``; never imports a path taken from a payload."""
    tasks = known_tasks(backend.task_modules if backend else None)
    if path not in tasks:
        raise LookupError(
            f"{path!r} is not a @task found in an installed app's tasks module or OPTIONS['TASK_MODULES']"
        )
    return tasks[path]


def _worker_id() -> str:
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def run_task_message(message: Message) -> None:
    """Handler of every task queue: run the task, record its status, send the signals."""
    from .models import TaskResultRecord

    payload = message.payload
    if not isinstance(payload, dict) or "task" not in payload or "result_id" not in payload:
        raise Discard("not a task message (payload lacks 'task'/'result_id')")
    backend = task_backends[payload.get("backend", "default")]
    try:
        task = find_task(payload["task"], backend if isinstance(backend, LonnyMQBackend) else None)
    except LookupError as exc:
        raise Discard(str(exc)) from None
    database = getattr(backend, "database", lonnymq_settings.DATABASE)
    records = TaskResultRecord.objects.using(database)
    record = records.filter(id=payload["result_id"]).first()
    if record is None:  # results were purged: run anyway, keep an in-memory record
        record = TaskResultRecord(
            id=payload["result_id"],
            backend=backend.alias,
            task_path=task.module_path,
            queue=message.queue,
            channel=message.channel,
            message_id=message.id,
            status="READY",
            args=payload.get("args", []),
            kwargs=payload.get("kwargs", {}),
            enqueued_at=message.enqueued_at,
        )
    started = timezone.now()
    record.status = "RUNNING"
    record.started_at = record.started_at or started
    record.last_attempted_at = started
    record.worker_ids = [*record.worker_ids, _worker_id()]
    records.filter(id=record.id).update(
        status="RUNNING",
        started_at=record.started_at,
        last_attempted_at=started,
        worker_ids=record.worker_ids,
    )
    result = _result_from_record(record, task)
    _task_signals.task_started.send(type(backend), task_result=result)
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=result), *record.args, **record.kwargs)
        else:
            value = task.call(*record.args, **record.kwargs)
    except Exception as exc:
        error = {
            "exception_class_path": _module_path(type(exc)),
            "traceback": "".join(traceback.format_exception(exc)),
        }
        final = message.is_last_attempt
        status = "FAILED" if final else "READY"
        finished = timezone.now() if final else None
        records.filter(id=record.id).update(
            status=status, errors=[*record.errors, error], finished_at=finished
        )
        if final:
            record.status, record.errors, record.finished_at = status, [*record.errors, error], finished
            _task_signals.task_finished.send(type(backend), task_result=_result_from_record(record, task))
        raise
    try:
        stored = api._payload(value, "return value")
    except LonnyMQError as exc:
        raise Discard(f"task {task.module_path} returned a value that cannot be stored: {exc}") from exc
    import json

    finished = timezone.now()
    records.filter(id=record.id).update(
        status="SUCCESSFUL", return_value=json.loads(stored), finished_at=finished
    )
    record.status, record.return_value, record.finished_at = "SUCCESSFUL", json.loads(stored), finished
    _task_signals.task_finished.send(type(backend), task_result=_result_from_record(record, task))


def task_queues() -> list[str]:
    """The queues of every configured LonnyMQBackend."""
    from django.conf import settings

    queues: list[str] = []
    for alias, config in getattr(settings, "TASKS", {}).items():
        if config.get("BACKEND", "").endswith("LonnyMQBackend"):
            backend = task_backends[alias]
            queues.extend(sorted(backend.queues))
    return queues


def register_task_handlers() -> list[str]:
    """Register :func:`run_task_message` as the handler of every task queue (for the worker)."""
    queues = task_queues()
    for queue_name in queues:
        register_default(queue_name, run_task_message)
    return queues


add_discovery_hook(register_task_handlers)
