"""What a worker tells the outside about its messages: one observer interface.

An :class:`Observer` has one method per event, each doing nothing: a subclass overrides the
events it needs and is attached with ``worker.observers.add(observer)``. The log lines
(:class:`LogObserver`), the spans (``django_lonnymq.tracing.worker``), the per-worker metrics
(``django_lonnymq.prometheus.worker.WorkerMetrics``), the dashboard's samples (``housekeeping.Samples``) and the
lifecycle signals (:class:`SignalObserver`, :mod:`django_lonnymq.signals`) are observers.
An observer that raises is logged, never fatal (a lost database connection is passed on, for
the worker to reconnect).

Events on the worker's control thread: ``fetched``, then, as the database recorded them,
``acked``, ``retried``, ``snoozed``, ``dead``, ``timed_out`` and ``cancelled`` (each followed
by ``retried`` or ``dead``), ``lease_lost``; ``tick`` at each maintenance step (housekeeping
on), ``channels_pruned`` when its housekeeping deleted idle channels, and ``stopped`` once the
worker stopped. On the thread (or event-loop task) that runs the
handler: ``handler_started`` right before it, ``handler_finished`` right after, with the
:class:`~django_lonnymq.worker.outcomes.Outcome` the run asks for.

Outcomes (the ``outcome`` label of ``lonnymq_worker_messages_total``): :data:`OUTCOMES`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .. import signals
from ..message import Message
from .outcomes import FAIL_REASONS, Outcome

logger = logging.getLogger("django_lonnymq.worker")

OUTCOMES = ("acked", "retried", "snoozed", "dead", "timed_out", "cancelled", "lease_lost")

EVENTS = (
    "fetched",
    "handler_started",
    "handler_finished",
    "acked",
    "retried",
    "snoozed",
    "dead",
    "timed_out",
    "cancelled",
    "lease_lost",
    "tick",
    "channels_pruned",
    "stopped",
)


class Observer:
    """The worker's events; each does nothing here (see the module's docstring)."""

    def fetched(self, messages: Sequence[Message]) -> None:
        """Leased by one dequeue, not started yet."""

    def handler_started(self, message: Message) -> None:
        """Right before the handler runs, in its thread (or task)."""

    def handler_finished(self, message: Message, seconds: float, outcome: Outcome) -> None:
        """Right after the handler ran, in the same thread (or task)."""

    def acked(self, message: Message) -> None:
        """The ack is recorded: the message is done."""

    def retried(self, outcome: Outcome) -> None:
        """A failure is recorded and the message will run again."""

    def snoozed(self, message: Message) -> None:
        """A snooze is recorded: the message waits again, no attempt spent (a snooze past
        ``LONNYMQ_MAX_SNOOZES`` is a failure instead: ``retried`` or ``dead``)."""

    def dead(self, outcome: Outcome) -> None:
        """A failure is recorded and the message went to the dead letters."""

    def timed_out(self, message: Message) -> None:
        """Its handler ran past the timeout (``retried`` or ``dead`` follows)."""

    def cancelled(self, message: Message) -> None:
        """It was cancelled before or while its handler ran (``retried`` or ``dead`` follows)."""

    def lease_lost(self, message: Message) -> None:
        """Its lease expired before its outcome could be recorded: it may run again."""

    def tick(self) -> None:
        """The worker's maintenance step (its control thread and connection)."""

    def channels_pruned(self, count: int) -> None:
        """Its housekeeping deleted ``count`` idle, empty channels (``LONNYMQ_CHANNEL_IDLE_PRUNE``)."""

    def stopped(self) -> None:
        """The worker stopped serving."""


def _overrides(observer: Observer, event: str) -> bool:
    return getattr(type(observer), event) is not getattr(Observer, event)


class Observers:
    """The observers of one worker: each event goes to every observer that overrides it."""

    def __init__(self, passes: Callable[[BaseException], bool] = lambda exc: False) -> None:
        """``passes(exc)``: an error of a control-thread event to raise, not log (a lost
        connection)."""
        self._observers: list[Observer] = []
        self._passes = passes
        self._hooks: dict[str, list[Callable[..., None]]] = {event: [] for event in EVENTS}
        self._started = self._hooks["handler_started"]
        self._finished = self._hooks["handler_finished"]
        self._acked = self._hooks["acked"]

    def add(self, observer: Observer) -> None:
        self._observers.append(observer)
        for event in EVENTS:
            if _overrides(observer, event):
                self._hooks[event].append(getattr(observer, event))

    def __iter__(self) -> Iterator[Observer]:
        return iter(list(self._observers))

    def _logged(self, hook: Callable[..., None], exc: Exception, control: bool) -> None:
        if control and self._passes(exc):
            raise exc
        logger.exception("observer %s failed", getattr(hook, "__qualname__", hook))

    def _each(self, event: str, *args: Any) -> None:
        for hook in self._hooks[event]:
            try:
                hook(*args)
            except Exception as exc:
                self._logged(hook, exc, control=True)

    # The per-message events of handler threads and of acks: a loop each, no look-up.
    def handler_started(self, message: Message) -> None:
        for hook in self._started:
            try:
                hook(message)
            except Exception as exc:
                self._logged(hook, exc, control=False)

    def handler_finished(self, message: Message, seconds: float, outcome: Outcome) -> None:
        for hook in self._finished:
            try:
                hook(message, seconds, outcome)
            except Exception as exc:
                self._logged(hook, exc, control=False)

    def acked(self, message: Message) -> None:
        for hook in self._acked:
            try:
                hook(message)
            except Exception as exc:
                self._logged(hook, exc, control=True)

    def fetched(self, messages: Sequence[Message]) -> None:
        if self._hooks["fetched"]:
            self._each("fetched", messages)

    def retried(self, outcome: Outcome) -> None:
        self._each("retried", outcome)

    def snoozed(self, message: Message) -> None:
        self._each("snoozed", message)

    def dead(self, outcome: Outcome) -> None:
        self._each("dead", outcome)

    def timed_out(self, message: Message) -> None:
        self._each("timed_out", message)

    def cancelled(self, message: Message) -> None:
        self._each("cancelled", message)

    def lease_lost(self, message: Message) -> None:
        self._each("lease_lost", message)

    def tick(self) -> None:
        self._each("tick")

    def channels_pruned(self, count: int) -> None:
        self._each("channels_pruned", count)

    def stopped(self) -> None:
        self._each("stopped")


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else "-"


def dead_reason(outcome: Outcome) -> str:
    """The reason stored with a dead-lettered message, as the ``fail`` statement records it."""
    reason = FAIL_REASONS.get(outcome.action, "failed")
    if outcome.message.cancel_requested and reason != "discarded":
        reason = "cancelled"  # what lonnymq_fail_v2 records for a cancelled message
    return reason


class LogObserver(Observer):
    """The worker's log lines about outcomes (logger ``django_lonnymq.worker``)."""

    def dead(self, outcome: Outcome) -> None:
        message = outcome.message
        reason = dead_reason(outcome)
        logger.warning(
            "message %s of %s/%s dead-lettered (reason %s, attempt %d of %d): %s",
            message.id,
            message.queue,
            message.channel,
            reason,
            message.attempt,
            message.max_attempts,
            _last_line(outcome.error),
        )

    def snoozed(self, message: Message) -> None:
        logger.info("message %s of %s/%s snoozed", message.id, message.queue, message.channel)

    def lease_lost(self, message: Message) -> None:
        logger.warning(
            "lease on message %s expired before it finished; it may run again (raise --lease?)", message.id
        )

    def channels_pruned(self, count: int) -> None:
        logger.info("pruned %d idle empty channel(s)", count)


# What a recorded failure that is not dead comes to, by the outcome's action.
_AGAIN = {"timeout": "timed_out", "cancelled": "cancelled"}


class SignalObserver(Observer):
    """Sends the lifecycle signals of :mod:`django_lonnymq.signals` (every worker attaches
    one; eager mode calls it too). With no receiver each event is one list check."""

    def handler_started(self, message: Message) -> None:
        if signals.message_started.receivers:
            signals.send(signals.message_started, Message, message=message)

    def acked(self, message: Message) -> None:
        if signals.message_finished.receivers:
            signals.send(signals.message_finished, Message, message=message, outcome="acked", error=None)

    def retried(self, outcome: Outcome) -> None:
        if signals.message_finished.receivers:
            signals.send(
                signals.message_finished,
                Message,
                message=outcome.message,
                outcome=_AGAIN.get(outcome.action, "retried"),
                error=outcome.error,
            )

    def snoozed(self, message: Message) -> None:
        if signals.message_finished.receivers:
            signals.send(signals.message_finished, Message, message=message, outcome="snoozed", error=None)

    def dead(self, outcome: Outcome) -> None:
        if signals.message_dead.receivers:
            signals.send(
                signals.message_dead,
                Message,
                message=outcome.message,
                reason=dead_reason(outcome),
                error=outcome.error,
            )
        if signals.message_finished.receivers:
            signals.send(
                signals.message_finished,
                Message,
                message=outcome.message,
                outcome="dead",
                error=outcome.error,
            )

    def lease_lost(self, message: Message) -> None:
        if signals.message_finished.receivers:
            signals.send(signals.message_finished, Message, message=message, outcome="lease_lost", error=None)
