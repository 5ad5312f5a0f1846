"""The worker side: run a task message (its result row kept in step with the run, the
framework's signals sent whatever stops it), and the task queues' handler registration."""

from __future__ import annotations

import contextlib
import json
import traceback
from typing import Any, NoReturn

from django.db import connections, transaction
from django.utils import timezone

from .. import arguments, routing
from ..exceptions import (
    Discard,
    LonnyMQError,
    PayloadError,
    Snooze,
    UnknownTask,
    WorkerInterrupted,
)
from ..message import Message
from ..registry import add_discovery_hook, register_default
from ..signals import send_each
from .backend import LonnyMQBackend, _module_path, any_queue_is_a_task_queue, lonnymq_backends, task_queues
from .context import running_step
from .discovery import find_task
from .framework import (
    DEFAULT_TASK_BACKEND_ALIAS,
    DEFAULT_TASK_QUEUE_NAME,
    InvalidTaskBackend,
    TaskContext,
    TaskResult,
    _task_signals,
    logger,
    task_backends,
)
from .results import _as_enqueued, _result_from_record, _stand_in_task


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
    from ..models import TaskResultRecord

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


def all_task_queues(existing: list[str]) -> list[str]:
    """What ``run_queue_worker --queue '*'`` serves: every named task queue and, when a
    backend accepts any queue name, ``default`` and each queue in ``existing`` (the queues the
    database holds) that has no handler of its own."""
    from ..registry import get_handler

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
    from ..registry import set_fallback

    queues = task_queues()
    for queue_name in queues:
        register_default(queue_name, run_task_message)
    set_fallback(run_task_message if any_queue_is_a_task_queue() else None)
    return queues


add_discovery_hook(register_task_handlers)
