"""Giving leases back: handlers' outcomes recorded in batches, and releases on shutdown.

Handler threads :meth:`~Completion.post` outcomes; the control thread :meth:`~Completion.flush`es
them: every ack in one call (its arrays sent as literals), each failure, retry or discard in
one call of its own. An outcome sent when the connection dropped is sent again after
reconnecting: the first call may have committed, which the second tells apart.
"""

from __future__ import annotations

import logging
import queue as queue_mod
from collections.abc import Iterable

import psycopg

from ..conf import settings
from ..exceptions import InvalidArgument, LeaseLost, MessageNotFound
from ..message import Message
from .connection import DB_ERRORS, STATEMENT_ERRORS, ControlConnection, describe_failure, root_error
from .held import Held
from .observer import Observers
from .outcomes import Outcome, fail_params, snooze_params, snoozed_too_often, suspend_params
from .stats import Stats
from .waiting import Waiter

logger = logging.getLogger("django_lonnymq.worker")


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


class Completion:
    """The outcomes waiting to be recorded, and the calls that record them."""

    def __init__(
        self, connection: ControlConnection, held: Held, observers: Observers, stats: Stats, waiter: Waiter
    ):
        self.connection = connection
        self.held = held
        self.observers = observers
        self.stats = stats
        self.waiter = waiter
        # SimpleQueue: put and get in C, a few microseconds less per message than queue.Queue.
        self._outcomes: queue_mod.SimpleQueue[Outcome] = queue_mod.SimpleQueue()

    def post(self, outcome: Outcome) -> None:
        """A handler's outcome, for the control thread to record (woken if it sleeps)."""
        self._outcomes.put(outcome)
        if self.waiter.sleeping:
            self.waiter.nudge()

    def pending(self) -> bool:
        return not self._outcomes.empty()

    def flush(self) -> None:
        """Ack everything finished in one call; fail/retry/discard one by one."""
        done: list[Outcome] = []
        while True:
            try:
                done.append(self._outcomes.get_nowait())
            except queue_mod.Empty:
                break
        if not done:
            return
        recorded: list[Outcome] = []
        try:
            step_acks = [o for o in done if o.action == "ack" and o.message.step_name is not None]
            if step_acks:
                self._ack_steps(step_acks)
                recorded.extend(step_acks)
            acks = [o for o in done if o.action == "ack" and o.message.step_name is None]
            if acks:
                ids = array_literal(o.message.id for o in acks)
                tokens = array_literal(o.message.lease_token for o in acks)
                acked = set(self.connection.value("ack", {"ids": ids, "tokens": tokens}) or [])
                self.stats.acked += len(acked)
                missing = [o for o in acks if o.message.id not in acked]
                gone = self._gone([o.message.id for o in missing if o.resent])
                for outcome in acks:
                    if outcome.message.id in acked or outcome.message.id in gone:
                        self.observers.acked(outcome.message)
                for outcome in missing:
                    if outcome.message.id in gone:
                        self.stats.acked += 1  # the ack sent before the connection dropped committed
                    else:
                        self._lost(outcome.message)
                recorded.extend(acks)
            for outcome in done:
                if outcome.action != "ack":
                    self._fail(outcome)
                    recorded.append(outcome)
        except STATEMENT_ERRORS:
            for outcome in done:  # keep what was not recorded: flushed again after reconnecting
                if not any(outcome is r for r in recorded):
                    outcome.resent = True
                    self._outcomes.put(outcome)
            raise
        finally:
            self.held.drop(outcome.message.id for outcome in recorded)

    def _ack_steps(self, acks: list[Outcome]) -> None:
        """Ack workflow steps with their outputs; the same call releases their ready children.

        A batch the database refuses (on a healthy connection) is acked again one step at a
        time, and a step whose own ack is refused fails alone with that error: one output
        the database will not store never holds up the others, nor the worker."""
        try:
            acked = set(
                self.connection.value(
                    "workflow_ack",
                    {
                        "ids": array_literal(o.message.id for o in acks),
                        "tokens": array_literal(o.message.lease_token for o in acks),
                        "outputs": text_array_literal(o.output for o in acks),
                        "tolerance_ms": settings.ms("WAKE_TOLERANCE"),
                    },
                )
                or []
            )
        except STATEMENT_ERRORS as exc:
            if self.connection.is_lost(exc) or not refuses_data(exc):
                raise  # sent again: after reconnecting, or once the passing trouble is over
            if len(acks) > 1:
                for outcome in acks:
                    self._ack_steps([outcome])
                return
            [outcome] = acks
            kind, detail = describe_failure(exc)
            logger.error(
                "the ack of step %s was refused (%s: %s); failing it", outcome.message.id, kind, detail
            )
            self._fail(
                Outcome(outcome.message, "fail", error=f"the step's output could not be stored: {detail}")
            )
            return
        self.stats.acked += len(acked)
        missing = [o for o in acks if o.message.id not in acked]
        gone = self._gone([o.message.id for o in missing if o.resent])
        for outcome in acks:
            if outcome.message.id in acked or outcome.message.id in gone:
                self.observers.acked(outcome.message)
        for outcome in missing:
            if outcome.message.id in gone:
                self.stats.acked += 1  # the ack sent before the connection dropped committed
            else:
                self._lost(outcome.message)

    def _gone(self, ids: list[int]) -> set[int]:
        """Of ``ids``, those no longer in the message table."""
        if not ids:
            return set()
        found = self.connection.run("messages_present", {"ids": ids})
        return set(ids) - {row[0] for row in found}

    def _fail(self, outcome: Outcome) -> None:
        message = outcome.message
        base_ms, max_ms = settings.ms("RETRY_BACKOFF_BASE"), settings.ms("RETRY_BACKOFF_MAX")
        tolerance_ms = settings.ms("WAKE_TOLERANCE")
        try:
            if outcome.action == "suspend":
                result = self.connection.value("suspend", suspend_params(outcome, tolerance_ms=tolerance_ms))
                if result == "suspended":
                    self.observers.suspended(message)
                    return
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
                )
                result = self.connection.value("snooze", params)
                if result == "snoozed":
                    self.observers.snoozed(message)
                    return
                # Past the bound, or cancelled: a failure, recorded as such.
                outcome.error = None if message.cancel_requested else snoozed_too_often(max_snoozes)
            else:
                params = fail_params(
                    outcome, backoff_base_ms=base_ms, backoff_max_ms=max_ms, tolerance_ms=tolerance_ms
                )
                result = self.connection.value("fail", params)
        except (LeaseLost, MessageNotFound):
            if outcome.resent:  # recorded by the call in flight when the connection dropped
                logger.info("failure of message %s was recorded before the connection dropped", message.id)
            else:
                self._lost(message)
            return
        except Exception as exc:
            if isinstance(exc, DB_ERRORS) and self.connection.is_lost(exc):
                raise
            logger.error("could not record the failure of message %s: %r", message.id, exc)
            return
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

    def _lost(self, message: Message) -> None:
        self.stats.lease_lost += 1
        self.observers.lease_lost(message)

    def release(self, messages: list[Message]) -> None:
        """Give back leases whose handler never started (shutdown): due again at once."""
        if not messages:
            return
        released = self.connection.value(
            "release",
            {
                "ids": [m.id for m in messages],
                "tokens": [str(m.lease_token) for m in messages],
                "tolerance_ms": settings.ms("WAKE_TOLERANCE"),
            },
        )
        self.stats.released += len(released or [])
