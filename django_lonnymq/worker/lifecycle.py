"""The message lifecycle's statements, written once for its two executors: leasing due
messages, and recording each handler's outcome (an ack, a step's ack that releases its
children, a retry or a dead letter, a snooze, a suspension).

- **The worker** drives it on its control connection (:class:`~.connection.ControlConnection`):
  batches of leases, acks gathered in one call, real back-off, a connection that can drop
  (``worker/fetching.py``, ``worker/completion.py``).
- **Eager mode** (tests, ``django_lonnymq.eager``) drives it on Django's connection inside the
  caller's transaction (:class:`DjangoExecutor`): one message at a time, retries and snoozes
  due at once.

A new lifecycle feature (a new outcome, a new statement) is written here, once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, Protocol

import psycopg

from .. import db, jsontext, signals, statements
from ..conf import settings
from ..durable import Durable
from ..exceptions import InvalidArgument, LeaseLost, MessageNotFound
from ..message import Message, is_step, workflow_of
from ..progress import Progress
from ..progress import report as check_report
from .connection import root_error
from .observer import Observer, Observers
from .outcomes import Outcome, fail_params, message_from_row, snooze_params, snoozed_too_often, suspend_params
from .stats import Stats

logger = logging.getLogger("django_lonnymq.worker")


class Executor(Protocol):
    """Where the lifecycle's statements run."""

    # jsonb comes back as its text (Django's connection, for JSONField to decode), not
    # decoded (psycopg's own loaders, on the worker's connection).
    json_as_text: bool

    def run(self, name: str, params: db.Params = None) -> list[db.Row]: ...

    def value(self, name: str, params: db.Params = None) -> Any: ...

    def raises(self, exc: BaseException) -> bool:
        """A recording that failed with ``exc`` goes up to the caller (True), or is logged and
        left (False: the worker goes on with its other messages)."""
        ...


class DjangoExecutor:
    """Eager mode's executor: Django's connection ``alias``, in the caller's transaction."""

    json_as_text = True

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def run(self, name: str, params: db.Params = None) -> list[db.Row]:
        return db.rows(name, params, using=self.alias)

    def value(self, name: str, params: db.Params = None) -> Any:
        return db.value(name, params, using=self.alias)

    def raises(self, exc: BaseException) -> bool:
        return True  # the caller's code (a test) sees every error


# ---------------------------------------------------------------------------------------
# Leasing
# ---------------------------------------------------------------------------------------


def lease(
    executor: Executor,
    queue: str,
    want: int,
    *,
    worker: str,
    lease_ms: int,
    using: str,
    eager: bool = False,
    extend: Callable[[Message, timedelta | float | None], None] | None = None,
    report: Callable[[Message, Any], None] | None = None,
) -> list[Message]:
    """Lease up to ``want`` due messages of ``queue``: the messages, each with its durable
    steps' context (on Django's connection ``using``) and, for a workflow's step, its
    workflow, name and parents' outputs (the dequeue returns them with it). ``extend`` backs
    ``message.extend_lease()``, ``report`` ``message.progress()``."""
    leased = statements.dequeue(
        queue=queue,
        batch_size=want,
        lease_ms=lease_ms,
        worker=worker,
        tolerance_ms=settings.ms("WAKE_TOLERANCE"),
        on=executor,
    )
    messages = []
    for row in leased:
        message = message_from_row(queue, row, extend)
        if executor.json_as_text:
            message.payload = jsontext.decode(message.payload)
        message._durable = Durable(using, eager=eager)
        message._progress = None if report is None else progress_reporter(report)
        if message.dedup_key is not None and message.dedup_key.startswith("lonnymq."):
            workflow_inputs(message, row.step_name, row.outputs, row.inputs_bytes)
        messages.append(message)
    return messages


def workflow_inputs(message: Message, step_name: str | None, outputs: Any, inputs_bytes: int | None) -> None:
    """A workflow's message (its dedup key says so): its workflow, and for a step its name
    and parents' outputs, which the dequeue statement returns with it (plain messages cost
    nothing). Outputs past their bound are not built (NULL): the step is refused."""
    message.workflow_id = workflow_of(message.dedup_key)
    if step_name is not None and is_step(message.dedup_key):
        message.step_name = step_name
        if outputs is None:
            message._inputs_too_large = inputs_bytes
        else:
            message.parent_outputs = json.loads(outputs) if isinstance(outputs, str) else dict(outputs)


# ---------------------------------------------------------------------------------------
# Recording outcomes
# ---------------------------------------------------------------------------------------


def progress_reporter(report: Callable[[Message, Progress], None]) -> Callable[..., None]:
    """``message.progress(done, total, note)``: the report checked (a typed error, nothing
    recorded), handed to ``report`` (a worker's buffer, eager mode's writer), then the signal."""

    def progress(message: Message, done: Any, total: Any, note: Any) -> None:
        checked = check_report(done, total, note)
        report(message, checked)
        signals.send(
            signals.message_progress,
            Message,
            message=message,
            done=checked.done,
            total=checked.total,
            note=checked.note,
        )

    return progress


def record_progress(executor: Executor, reports: list[tuple[Message, Progress]]) -> int:
    """Write the latest progress report of each message (``message.progress()``) in one call:
    a worker's reports since its last write, eager mode's one report. Returns the rows written."""
    if not reports:
        return 0
    return int(
        statements.progress(
            ids=[m.id for m, _ in reports],
            queues=[m.queue for m, _ in reports],
            channels=[m.channel for m, _ in reports],
            done=[p.done for _, p in reports],
            totals=[p.total for _, p in reports],
            notes=[p.note for _, p in reports],
            on=executor,
        )
        or 0
    )


def array_literal(values: Iterable[object]) -> str:
    """A PostgreSQL array literal of ints or UUIDs (nothing to quote): the ack's arrays as
    one string each, where psycopg's list adapter cost more than the statement's parsing."""
    return "{" + ",".join(map(str, values)) + "}"


def text_array_literal(values: Iterable[str | None]) -> str:
    """A PostgreSQL array literal of texts (None: NULL), each quoted: a step ack's outputs
    (JSON text) as one string, like :func:`array_literal`."""
    return "{" + ",".join("NULL" if v is None else _quoted(v) for v in values) + "}"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def refuses_data(exc: BaseException) -> bool:
    """The statement failed for what it was given (a value the schema refuses, one past a
    limit of PostgreSQL's), not for a passing reason (a deadlock, a timeout): sent again,
    it would fail again."""
    root = root_error(exc)
    return isinstance(exc, InvalidArgument) or isinstance(
        root, (psycopg.DataError, psycopg.IntegrityError, psycopg.errors.ProgramLimitExceeded)
    )


class Recorder:
    """Turns outcomes into their statements, and tells the observers what was recorded.

    ``at_once``: retries and snoozes are due at once (eager mode); otherwise they wait their
    back-off (``LONNYMQ_RETRY_BACKOFF_BASE`` / ``_MAX``)."""

    def __init__(
        self,
        executor: Executor,
        observers: Observers | Observer,
        stats: Stats | None = None,
        *,
        at_once: bool = False,
    ) -> None:
        self.executor = executor
        self.observers = observers
        self.stats = stats if stats is not None else Stats()
        self.at_once = at_once

    def ack(self, acks: list[Outcome]) -> list[Outcome]:
        """Ack plain messages in one call. Returns the outcomes whose lease was gone."""
        acked = set(
            statements.ack(
                ids=array_literal(o.message.id for o in acks),
                tokens=array_literal(o.message.lease_token for o in acks),
                on=self.executor,
            )
            or []
        )
        return self._acked(acks, acked)

    def ack_steps(self, acks: list[Outcome]) -> list[Outcome]:
        """Ack workflow steps with their outputs; the same call releases their ready
        children. Returns the outcomes whose lease was gone."""
        acked = set(
            statements.workflow_ack(
                ids=array_literal(o.message.id for o in acks),
                tokens=array_literal(o.message.lease_token for o in acks),
                outputs=text_array_literal(o.output for o in acks),
                tolerance_ms=settings.ms("WAKE_TOLERANCE"),
                on=self.executor,
            )
            or []
        )
        return self._acked(acks, acked)

    def _acked(self, acks: list[Outcome], acked: set[int]) -> list[Outcome]:
        """Count and report the acks; an ack resent after a reconnect whose message is gone
        was committed by the first send."""
        self.stats.acked += len(acked)
        missing = [o for o in acks if o.message.id not in acked]
        gone = self._gone([o.message.id for o in missing if o.resent])
        for outcome in acks:
            if outcome.message.id in acked or outcome.message.id in gone:
                self.observers.acked(outcome.message)
        lost = []
        for outcome in missing:
            if outcome.message.id in gone:
                self.stats.acked += 1  # the ack sent before the connection dropped committed
            else:
                self.lost(outcome.message)
                lost.append(outcome)
        return lost

    def _gone(self, ids: list[int]) -> set[int]:
        """Of ``ids``, those no longer in the message table."""
        if not ids:
            return set()
        found = statements.messages_present(ids=ids, on=self.executor)
        return set(ids) - {row[0] for row in found}

    def fail(self, outcome: Outcome) -> str | None:
        """Record an outcome other than an ack: a suspension, a snooze, a retry or a dead
        letter (a failure, a timeout, a cancel, a refusal). Returns what the statement did
        ("suspended", "snoozed", "retry", "dead"), or None when nothing was recorded."""
        message = outcome.message
        base_ms = 0 if self.at_once else settings.ms("RETRY_BACKOFF_BASE")
        max_ms = 0 if self.at_once else settings.ms("RETRY_BACKOFF_MAX")
        tolerance_ms = settings.ms("WAKE_TOLERANCE")
        try:
            if outcome.action == "suspend":
                result = statements.suspend(
                    **suspend_params(outcome, tolerance_ms=tolerance_ms), on=self.executor
                )
                if result == "suspended":
                    self.observers.suspended(message)
                    return str(result)
                outcome.error = "cancelled while suspending"  # buried as cancelled by lonnymq_suspend_v1
                outcome.action = "cancelled"
            elif outcome.action == "snooze":
                max_snoozes = settings.MAX_SNOOZES
                params = snooze_params(
                    outcome,
                    max_snoozes=max_snoozes,
                    backoff_base_ms=base_ms,
                    backoff_max_ms=max_ms,
                    tolerance_ms=tolerance_ms,
                    at_once=self.at_once,
                )
                result = statements.snooze(**params, on=self.executor)
                if result == "snoozed":
                    self.observers.snoozed(message)
                    return str(result)
                # Past the bound, or cancelled: a failure, recorded as such.
                outcome.error = None if message.cancel_requested else snoozed_too_often(max_snoozes)
            else:
                params = fail_params(
                    outcome,
                    backoff_base_ms=base_ms,
                    backoff_max_ms=max_ms,
                    tolerance_ms=tolerance_ms,
                    at_once=self.at_once,
                )
                result = statements.fail(**params, on=self.executor)
        except (LeaseLost, MessageNotFound):
            if outcome.resent:  # recorded by the call in flight when the connection dropped
                logger.info("failure of message %s was recorded before the connection dropped", message.id)
            else:
                self.lost(message)
            return None
        except Exception as exc:
            if self.executor.raises(exc):
                raise
            logger.error("could not record the failure of message %s: %r", message.id, exc)
            return None
        if outcome.action == "timeout":
            self.stats.timed_out += 1
            self.observers.timed_out(message)
        elif outcome.action == "cancelled":
            self.stats.cancelled += 1
            self.observers.cancelled(message)
        if result == "dead":
            self.stats.dead += 1
            self.observers.dead(outcome)
        else:
            self.stats.retried += 1
            self.observers.retried(outcome)
        return str(result)

    def lost(self, message: Message) -> None:
        self.stats.lease_lost += 1
        self.observers.lease_lost(message)
