"""The backend: ``enqueue`` (one call: the message and its result row), results, and which
queues are task queues."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from .. import arguments, bounds, routing, statements
from ..conf import enqueue_params
from ..conf import settings as lonnymq_settings
from ..exceptions import (
    LonnyMQError,
    UnknownTask,
)
from .checks import _backend_checks
from .context import _channel, _dedup
from .discovery import find_task
from .framework import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    _task_signals,
    task_backends,
)
from .results import _as_enqueued, _result_from_record, _stand_in_task


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
        from .. import eager

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
        message_id = int(statements.enqueue_task(**params, on=database))
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
        from .. import eager
        from ..models import TaskResultRecord

        key, mode = keyed
        arguments.dedup_key(key)
        arguments.on_duplicate(mode, key)
        params = {**params, "dedup_key": key, "on_duplicate": mode}
        (record,) = statements.enqueue_task_keyed(model=TaskResultRecord, **params, on=database)
        outcome = record.outcome
        if outcome == "created":
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
        from ..models import TaskResultRecord

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
