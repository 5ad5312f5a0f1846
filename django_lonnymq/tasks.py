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
``DEFAULT_CHANNEL``; a dedup key and its mode come from :func:`dedup` (a context manager,
docs/tasks.md). Priority 0..100 maps onto the queue's priority; negative priorities
cannot be expressed (priority only moves work earlier) and are refused by ``validate_task``.
Results are stored in ``lonnymq_task_result``, apart from the queue's hot tables.

The worker runs a task message only if its path names a ``Task`` object found in an
installed app's ``tasks`` module (or a module in ``OPTIONS["TASK_MODULES"]``): a payload
can never make the worker import arbitrary code. Every run ends its result in a final state
(or ``READY`` again while retries remain) with the error recorded, and sends
``task_started`` and ``task_finished``, whatever stopped it: an exception (``SystemExit``
and ``KeyboardInterrupt`` included), a return value that cannot be stored as JSON, a path
that is not a task, or a backend alias that is not configured.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import logging
import traceback
from collections.abc import Iterator
from importlib import import_module
from typing import Any, NoReturn

from django.db import connections, transaction
from django.utils import timezone

from . import arguments, bounds, db, routing
from .conf import enqueue_params
from .conf import settings as lonnymq_settings
from .exceptions import (
    Discard,
    LonnyMQError,
    PayloadError,
    Snooze,
    UnknownTask,
    WorkerInterrupted,
    WorkflowCancelled,
)
from .message import Message
from .registry import add_discovery_hook, register_default
from .signals import send_each

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


def _framework_exception(*names: str) -> type[Exception]:
    """The framework's exception class under its Django 6 or its backport name."""
    return next(getattr(_task_exceptions, name) for name in names if hasattr(_task_exceptions, name))


InvalidTask = _framework_exception("InvalidTask", "InvalidTaskError")
InvalidTaskBackend = _framework_exception("InvalidTaskBackend", "InvalidTaskBackendError")
TaskResultDoesNotExist: type[Exception] = _task_exceptions.TaskResultDoesNotExist

logger = logging.getLogger("django_lonnymq.tasks")

_channel: contextvars.ContextVar[str | None] = contextvars.ContextVar("lonnymq_task_channel", default=None)
_dedup: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "lonnymq_task_dedup", default=None
)
# The workflow step message whose task runs now: what workflows.parent_outputs() reads.
running_step: contextvars.ContextVar[Message | None] = contextvars.ContextVar(
    "lonnymq_running_step", default=None
)

# The OPTIONS the backend reads; any other key is reported by check() (a typo would be ignored).
OPTION_NAMES = ("CHANNEL_KWARG", "DEFAULT_CHANNEL", "DATABASE", "MAX_ATTEMPTS", "TASK_MODULES")


@contextlib.contextmanager
def channel(name: str) -> Iterator[None]:
    """Enqueue the tasks of this block into tenant channel ``name``."""
    arguments.channel(name)
    token = _channel.set(name)
    try:
        yield
    finally:
        _channel.reset(token)


@contextlib.contextmanager
def dedup(key: str, on_duplicate: str = "skip") -> Iterator[None]:
    """Enqueue the tasks of this block with dedup key ``key`` (per queue and channel) and mode
    ``on_duplicate``: ``"skip"`` returns the key's result, ``"replace"`` (debounce) and
    ``"update"`` (throttle) change the key's waiting task and return its result (see
    docs/tasks.md). A bad key or mode raises ``InvalidArgument`` here, before any enqueue."""
    arguments.name("dedup_key", key, bounds.MAX_DEDUP_KEY)  # a key is required here: None too is refused
    arguments.dedup_key(key)
    arguments.on_duplicate(on_duplicate, key)
    token = _dedup.set((key, on_duplicate))
    try:
        yield
    finally:
        _dedup.reset(token)


def _module_path(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _new_id() -> str:
    import uuid

    return str(uuid.uuid4())


class LonnyMQBackend(BaseTaskBackend):
    """Runs Django Tasks on django-lonnymq: fair channels, limits, leases, retries."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.default_channel: str = self.options.get("DEFAULT_CHANNEL", "default")
        self.channel_kwarg: str | None = self.options.get("CHANNEL_KWARG")
        # OPTIONS["DATABASE"] puts every task queue on that alias; without it each task queue
        # lives where LONNYMQ_QUEUE_DATABASES puts it (default: LONNYMQ_DATABASE).
        self.database_option: str | None = self.options.get("DATABASE")
        self.database: str = self.database_option or lonnymq_settings.DATABASE
        self.max_attempts: int | None = self.options.get("MAX_ATTEMPTS")
        self.task_modules: list[str] = list(self.options.get("TASK_MODULES", []))

    def database_for(self, queue_name: str) -> str:
        """The database alias of a task queue: its messages and results live there."""
        return routing.queue_database(queue_name, self.database_option)

    def databases(self) -> list[str]:
        """Every alias this backend's results may live on."""
        return routing.databases_of(self.database_option)

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
                arguments.queue(queue_name, "queue_name")
            except LonnyMQError as exc:
                raise InvalidTask(str(exc)) from exc

    # -- enqueue -----------------------------------------------------------------------

    def _channel_for(self, kwargs: dict[str, Any]) -> str:
        chosen = _channel.get()
        if chosen is None and self.channel_kwarg and self.channel_kwarg in kwargs:
            chosen = str(kwargs[self.channel_kwarg])
        return chosen or self.default_channel

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """One SQL call writes the message and its result row (one round trip outside a
        transaction); inside ``transaction.atomic()`` both commit or roll back with it."""
        from . import eager

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
        channel_name = arguments.channel(self._channel_for(result.kwargs))
        payload = {
            "task": task.module_path,
            "result_id": result_id,
            "backend": self.alias,
            "args": result.args,
            "kwargs": result.kwargs,
        }
        run_after = task.run_after
        priority = arguments.integer("priority", int(task.priority), 0, bounds.MAX_PRIORITY)
        run_at_ms, _ = arguments.when(
            run_after if run_after is not None and run_after > now else None, None, priority
        )
        max_attempts = lonnymq_settings.MAX_ATTEMPTS if self.max_attempts is None else self.max_attempts
        params = {
            "queue": task.queue_name,
            "channel": channel_name,
            "payload": arguments.payload(payload),
            "run_at_ms": run_at_ms,
            "priority": priority,
            "max_attempts": arguments.integer("max_attempts", max_attempts, 1, bounds.MAX_ATTEMPTS),
            "run_after": run_after,
            "enqueued_at": now,
            **enqueue_params(),
        }
        database = self.database_for(task.queue_name)
        keyed = _dedup.get()
        if keyed is not None:
            return self._enqueue_keyed(task, result, params, keyed, database)
        message_id = int(db.value("enqueue_task", params, using=database))
        if eager.enabled():
            eager.after_enqueue(task.queue_name, [message_id], database)
        _task_signals.task_enqueued.send(type(self), task_result=result)
        return result

    def _enqueue_keyed(
        self, task: Task, result: Any, params: dict[str, Any], keyed: tuple[str, str], database: str
    ) -> TaskResult:
        """An enqueue under :func:`dedup`: one SQL call creates, changes or finds the key's
        message and its one result row. ``task_enqueued`` is sent when a message was written
        (created or changed), not for a skip; eager mode delivers a created message (a changed
        one is still waiting for the delivery of the enqueue that created it)."""
        from . import eager
        from .models import TaskResultRecord

        key, mode = keyed
        arguments.dedup_key(key)
        arguments.on_duplicate(mode, key)
        params = {**params, "dedup_key": key, "on_duplicate": mode}
        (record,) = db.models(TaskResultRecord, "enqueue_task_keyed", params, using=database)
        outcome = record.outcome
        if outcome == "created":
            if eager.enabled():
                eager.after_enqueue(task.queue_name, [int(record.message_id)], database)
            _task_signals.task_enqueued.send(type(self), task_result=result)
            return result
        if record.task_path == task.module_path:
            found = _as_enqueued(task, record)
        else:  # skipped to the key's message of another task
            try:
                found = _as_enqueued(find_task(record.task_path, self), record)
            except UnknownTask:
                found = _stand_in_task(record.task_path, record.backend, record.queue, record.priority)
        stored = _result_from_record(record, found)
        if outcome == "changed":
            _task_signals.task_enqueued.send(type(self), task_result=stored)
        return stored

    # -- results -----------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        """The stored result; ``TaskResultDoesNotExist`` for an unknown id, or for a row
        whose task path is no longer a ``@task`` (it cannot be read as a ``TaskResult``)."""
        from .models import TaskResultRecord

        if not isinstance(result_id, str):
            raise TaskResultDoesNotExist(f"task result ids are strings, got {result_id!r}")
        for database in self.databases():  # ids are UUIDs: one database at most has it
            record = TaskResultRecord.objects.using(database).filter(id=result_id, backend=self.alias).first()
            if record is not None:
                break
        else:
            raise TaskResultDoesNotExist(result_id)
        try:
            task = find_task(record.task_path, self)
        except UnknownTask as exc:
            raise TaskResultDoesNotExist(
                f"task result {result_id} exists, but its task cannot be loaded: {exc}"
            ) from exc
        return _result_from_record(record, _as_enqueued(task, record))

    def check(self, **kwargs: Any) -> list[Any]:
        """What is misconfigured, ids ``lonnymq.E190``-``E195`` (and ``E005``)."""
        return _backend_checks(self)


def _backend_checks(backend: LonnyMQBackend) -> list[Any]:
    from django.apps import apps
    from django.core.checks import Error

    errors: list[Any] = []
    where = f"task backend {backend.alias!r}"
    if not apps.is_installed("django_lonnymq"):
        errors.append(
            Error(
                f"{where} is a LonnyMQBackend, but django_lonnymq is not in INSTALLED_APPS.",
                hint="Add 'django_lonnymq' to INSTALLED_APPS and run migrate: it owns the queue's "
                "tables and functions and the task result table.",
                id="lonnymq.E190",
            )
        )
    if backend.database not in connections.settings or connections[backend.database].vendor != "postgresql":
        errors.append(
            Error(
                f"{where} needs a PostgreSQL database alias, got {backend.database!r}",
                hint="Set OPTIONS['DATABASE'] (or LONNYMQ_DATABASE) to a PostgreSQL alias in DATABASES.",
                id="lonnymq.E005",
            )
        )
    unknown = sorted(set(backend.options) - set(OPTION_NAMES))
    if unknown:
        errors.append(
            Error(
                f"{where} has OPTIONS it does not know: {', '.join(map(repr, unknown))}.",
                hint=f"The options are: {', '.join(OPTION_NAMES)}.",
                id="lonnymq.E191",
            )
        )
    attempts = backend.max_attempts
    if attempts is not None and (
        isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 1000
    ):
        errors.append(
            Error(
                f"{where}: OPTIONS['MAX_ATTEMPTS'] must be an integer from 1 to 1000, got {attempts!r}.",
                hint="Use 1 for the reference backend's behaviour (no retries).",
                id="lonnymq.E192",
            )
        )
    for option, value, length in (
        ("DEFAULT_CHANNEL", backend.default_channel, 200),
        ("CHANNEL_KWARG", backend.channel_kwarg, 200),
    ):
        if option == "CHANNEL_KWARG" and value is None:
            continue
        try:
            arguments.name(option, value, length)
        except LonnyMQError as exc:
            errors.append(Error(f"{where}: OPTIONS['{option}']: {exc}.", id="lonnymq.E193"))
    modules = backend.options.get("TASK_MODULES", [])
    if isinstance(modules, str) or not isinstance(modules, (list, tuple)):
        errors.append(
            Error(
                f"{where}: OPTIONS['TASK_MODULES'] must be a list of module names, got {modules!r}.",
                id="lonnymq.E194",
            )
        )
    else:
        from importlib.util import find_spec

        for name in modules:
            try:
                found = isinstance(name, str) and find_spec(name) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                errors.append(
                    Error(
                        f"{where}: OPTIONS['TASK_MODULES'] names {name!r}, which cannot be imported.",
                        id="lonnymq.E194",
                    )
                )
    for queue_name in sorted(backend.queues, key=str):
        try:
            arguments.queue(queue_name, "QUEUES")
        except LonnyMQError as exc:
            errors.append(
                Error(f"{where}: {exc}.", hint="Queue names are 1 to 100 characters.", id="lonnymq.E195")
            )
    return errors


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
        raise UnknownTask(
            f"{path!r} is not a @task found in an installed app's tasks module or OPTIONS['TASK_MODULES']"
        )
    return tasks[path]


def _worker_id() -> str:
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def _error(exc: BaseException) -> dict[str, str]:
    return {
        "exception_class_path": _module_path(type(exc)),
        "traceback": "".join(traceback.format_exception(exc)),
    }


def _send_finished(sender: type, result: TaskResult) -> None:
    """``task_finished``, sent after the final state is stored. A receiver that raises is
    logged: the task's outcome is already recorded, and failing the message here would run
    a finished task again (``SystemExit`` and ``asyncio.CancelledError`` too)."""
    for receiver, raised in send_each(_task_signals.task_finished, sender, task_result=result):
        logger.error(
            "task_finished receiver %r raised %s for task result %s",
            receiver,
            type(raised).__name__,
            result.id,
            exc_info=raised,
        )


def _our_backend(alias: Any) -> LonnyMQBackend | None:
    """The LonnyMQBackend configured under ``alias``, or None."""
    from django.conf import settings

    if not isinstance(alias, str) or alias not in getattr(settings, "TASKS", {}):
        return None
    try:
        backend = task_backends[alias]
    except InvalidTaskBackend:
        return None
    return backend if isinstance(backend, LonnyMQBackend) else None


def _serving_backend(queue_name: str) -> LonnyMQBackend | None:
    """A LonnyMQBackend whose task queues include ``queue_name`` (where its results live)."""
    found = [b for b in lonnymq_backends() if not b.queues or queue_name in b.queues]
    named = [b for b in found if queue_name in b.queues]
    return next(iter(named or found), None)


def _is_task_payload(payload: Any) -> bool:
    return (
        isinstance(payload, dict)
        and isinstance(payload.get("task"), str)
        and isinstance(payload.get("result_id"), str)
    )


def _record_for(message: Message, payload: dict[str, Any], backend: LonnyMQBackend | None) -> tuple[Any, Any]:
    """The stored result row of a task message (and its queryset), or an in-memory stand-in
    when results were pruned meanwhile. Matched on id, backend and path, so a message cannot
    touch another task's result."""
    from .models import TaskResultRecord

    alias = payload.get("backend", DEFAULT_TASK_BACKEND_ALIAS)
    database = (
        backend.database_for(message.queue) if backend is not None else routing.queue_database(message.queue)
    )
    rows = TaskResultRecord.objects.using(database).filter(
        id=payload["result_id"], backend=str(alias), task_path=payload["task"]
    )
    record = rows.first()
    if record is None:
        args, kwargs = payload.get("args", []), payload.get("kwargs", {})
        record = TaskResultRecord(
            id=payload["result_id"],
            backend=str(alias),
            task_path=payload["task"],
            queue=message.queue,
            channel=message.channel,
            message_id=message.id,
            status="READY",
            args=args if isinstance(args, list) else [],
            kwargs=kwargs if isinstance(kwargs, dict) else {},
            enqueued_at=message.enqueued_at,
        )
    return record, rows


def _start(record: Any, rows: Any) -> None:
    started = timezone.now()
    record.status = "RUNNING"
    record.started_at = record.started_at or started
    record.last_attempted_at = started
    record.worker_ids = [*record.worker_ids, _worker_id()]
    rows.update(
        status="RUNNING",
        started_at=record.started_at,
        last_attempted_at=started,
        worker_ids=record.worker_ids,
    )


def _fail(record: Any, rows: Any, exc: BaseException, *, final: bool) -> None:
    record.errors = [*record.errors, _error(exc)]
    record.status = "FAILED" if final else "READY"
    record.finished_at = timezone.now() if final else None
    rows.update(status=record.status, errors=record.errors, finished_at=record.finished_at)


def _cannot_run(
    message: Message, payload: dict[str, Any], backend: LonnyMQBackend | None, error: UnknownTask
) -> NoReturn:
    """A task message that can never run (unknown path or backend): its result ends FAILED
    with ``error``, the signals are sent, and the message goes to the dead-letter table."""
    record, rows = _record_for(message, payload, backend)
    _start(record, rows)
    task = _stand_in_task(record.task_path, record.backend, record.queue, record.priority)
    sender = type(backend) if backend is not None else LonnyMQBackend
    for receiver, raised in send_each(
        _task_signals.task_started, sender, task_result=_result_from_record(record, task)
    ):
        logger.error("task_started receiver %r raised %r for task message %s", receiver, raised, message.id)
    _fail(record, rows, error, final=True)
    logger.error("task message %s cannot run: %s", message.id, error)
    _send_finished(sender, _result_from_record(record, task))
    raise Discard(str(error))


def run_task_message(message: Message) -> Any:
    """Handler of every task queue: run the task, record its status, send the signals."""
    payload = message.payload
    if not _is_task_payload(payload):
        raise Discard("not a task message (payload lacks 'task'/'result_id')")
    alias = payload.get("backend", DEFAULT_TASK_BACKEND_ALIAS)
    backend = _our_backend(alias)
    if backend is None:
        _cannot_run(
            message,
            payload,
            _serving_backend(message.queue),
            UnknownTask(f"backend {alias!r} is not a LonnyMQBackend in TASKS (renamed or removed?)"),
        )
    try:
        task = find_task(payload["task"], backend)
    except UnknownTask as exc:
        _cannot_run(message, payload, backend, exc)
    record, rows = _record_for(message, payload, backend)
    task = _as_enqueued(task, record)
    sender = type(backend)
    _start(record, rows)
    result = _result_from_record(record, task)
    step = running_step.set(message) if message.step_name is not None else None
    try:
        with _own_savepoint(rows.db):
            _task_signals.task_started.send(sender, task_result=result)
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *record.args, **record.kwargs)
            else:
                value = task.call(*record.args, **record.kwargs)
    except Snooze:
        # The message waits again without spending an attempt: no error, the result is READY.
        rows.update(status="READY")
        record.status = "READY"
        raise
    except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the worker goes on
        final = message.is_last_attempt
        _fail(record, rows, exc, final=final)
        if final:
            _send_finished(sender, _result_from_record(record, task))
        raise
    finally:
        if step is not None:
            running_step.reset(step)
    try:
        stored = json.loads(arguments.payload(value, "return value"))
    except PayloadError as exc:
        # Not retried: the task ran (its effects are done) and would return the same again.
        cause = exc.__cause__ if isinstance(exc.__cause__, (TypeError, ValueError)) else exc
        _fail(record, rows, cause, final=True)
        _send_finished(sender, _result_from_record(record, task))
        raise Discard(f"task {task.module_path} returned a value that cannot be stored: {exc}") from exc
    finished = timezone.now()
    rows.update(status="SUCCESSFUL", return_value=stored, finished_at=finished)
    record.status, record.return_value, record.finished_at = "SUCCESSFUL", stored, finished
    _send_finished(sender, _result_from_record(record, task))
    # A workflow step's output is the task's return value (a plain task message has none).
    return stored if message.step_name is not None else None


def _own_savepoint(alias: str) -> Any:
    """Eager mode runs the handler inside the caller's transaction: there the task gets a
    savepoint of its own, so a failing task's writes go while its result's status and errors
    stay (a worker's handler runs in autocommit: nothing to do)."""
    if connections[alias].in_atomic_block:
        return transaction.atomic(using=alias)
    return contextlib.nullcontext()


# Eager mode gives this handler no savepoint around the whole run: it makes its own
# (_own_savepoint), which keeps the result's bookkeeping when the task fails.
run_task_message.lonnymq_own_savepoint = True  # type: ignore[attr-defined]


def abandon_task_message(message: Message) -> None:
    """The worker exits at once while ``message``'s task runs: its result ends FAILED with
    :class:`WorkerInterrupted` and ``task_finished`` is sent. The message itself comes back
    when its lease expires (at least once), so the task may run again and its result move on."""
    payload = message.payload
    if not _is_task_payload(payload):
        return
    backend = _our_backend(payload.get("backend", DEFAULT_TASK_BACKEND_ALIAS))
    if backend is None:
        return
    record, rows = _record_for(message, payload, backend)
    if record.status != "RUNNING":
        return
    interrupted = WorkerInterrupted(
        f"the worker exited at once (second stop signal) while the task ran; message {message.id} "
        "comes back when its lease expires"
    )
    _fail(record, rows, interrupted, final=True)
    try:
        task = _as_enqueued(find_task(record.task_path, backend), record)
    except UnknownTask:
        task = _stand_in_task(record.task_path, record.backend, record.queue, record.priority)
    _send_finished(type(backend), _result_from_record(record, task))


# The worker calls a handler's ``on_abandon`` for each message it leaves running on a forced exit.
run_task_message.on_abandon = abandon_task_message  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------
# Which queues are task queues
# ---------------------------------------------------------------------------------------


def lonnymq_backends() -> list[LonnyMQBackend]:
    """Every configured LonnyMQBackend, in TASKS order."""
    from django.conf import settings

    found = []
    for alias, config in getattr(settings, "TASKS", {}).items():
        if str(config.get("BACKEND", "")).endswith("LonnyMQBackend"):
            backend = task_backends[alias]
            if isinstance(backend, LonnyMQBackend):
                found.append(backend)
    return found


def task_queues() -> list[str]:
    """The queues named in the QUEUES of every LonnyMQBackend."""
    queues: list[str] = []
    for backend in lonnymq_backends():
        queues.extend(q for q in sorted(backend.queues) if q not in queues)
    return queues


def any_queue_is_a_task_queue() -> bool:
    """A LonnyMQBackend with ``"QUEUES": []`` accepts any queue name (the framework's rule)."""
    return any(not backend.queues for backend in lonnymq_backends())


def all_task_queues(existing: list[str]) -> list[str]:
    """What ``run_queue_worker --queue '*'`` serves: every named task queue and, when a
    backend accepts any queue name, ``default`` and each queue in ``existing`` (the queues the
    database holds) that has no handler of its own."""
    from .registry import get_handler

    queues = task_queues()
    if any_queue_is_a_task_queue():
        for name in [DEFAULT_TASK_QUEUE_NAME, *existing]:
            if name in queues:
                continue
            try:
                own = get_handler(name) is not run_task_message
            except LonnyMQError:
                own = False
            if not own:
                queues.append(name)
    return queues


def register_task_handlers() -> list[str]:
    """Register :func:`run_task_message` as the handler of every task queue (for the worker);
    with a backend that accepts any queue name, also of every queue without a handler."""
    from .registry import set_fallback

    queues = task_queues()
    for queue_name in queues:
        register_default(queue_name, run_task_message)
    set_fallback(run_task_message if any_queue_is_a_task_queue() else None)
    return queues


add_discovery_hook(register_task_handlers)


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
    from .exceptions import InvalidArgument

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
    from .models import TaskResultRecord

    now = timezone.now()
    TaskResultRecord.objects.using(using).bulk_create(TaskResultRecord(**r, enqueued_at=now) for r in records)


def end_cancelled_step_results(result_ids: list[str], using: str) -> int:
    """The results of task steps cancelled before they ran (still ``READY``) end ``FAILED``,
    with a :class:`~django_lonnymq.exceptions.WorkflowCancelled` error: they will never run."""
    from .models import TaskResultRecord

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
