"""What a worker tells the outside about its messages: log lines, per-worker metrics, and
the dashboard's samples (sampling.py). The worker calls one hook per event; the logic lives here.

Outcomes (the ``outcome`` label of ``lonnymq_worker_messages_total``): ``acked``,
``retried``, ``dead``, ``timed_out``, ``cancelled``, ``lease_lost``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .message import Message
    from .metrics import WorkerMetrics
    from .worker import Outcome, Worker

logger = logging.getLogger("django_lonnymq.worker")

# Trace contexts of messages that are gone are dropped after this many seconds.
TRACE_PRUNE_EVERY = 60.0

OUTCOMES = ("acked", "retried", "dead", "timed_out", "cancelled", "lease_lost")


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else "-"


class Observer:
    """The hooks of one worker. ``metrics`` is None unless the worker serves metrics."""

    def __init__(self, worker: Worker, metrics: WorkerMetrics | None = None):
        from .sampling import Sampler
        from .tracing import Consumer

        self.worker = worker
        self.metrics = metrics
        self.sampler = Sampler(worker)
        self.tracing = Consumer()
        self._next_prune = 0.0

    def tick(self) -> None:
        """The worker's maintenance step (control thread, its connection): samples when due,
        and trace contexts of messages that are gone dropped once a minute."""
        self.sampler.tick()
        now = time.monotonic()
        if now >= self._next_prune:
            self._next_prune = now + TRACE_PRUNE_EVERY
            with self.worker._lock:
                held = set(self.worker._running)
            self.tracing.forget(held)
            self._quietly("drop old trace contexts", "trace_prune", {"older_than_s": TRACE_PRUNE_EVERY})

    def _quietly(self, what: str, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """A statement of the worker's that must never stop it (a lost connection is raised)."""
        try:
            return self.worker._execute(name, params)
        except Exception as exc:
            if self.worker._connection_is_lost(exc):
                raise
            logger.warning("worker %s could not %s: %s", self.worker.name, what, exc)
            return []

    def fetched(self, ids: list[int]) -> None:
        """Leased, not started yet: load the trace contexts their producers stored."""
        if ids and self.tracing.active():
            self.tracing.loaded(self._quietly("load trace contexts", "trace_load", {"ids": ids}))

    def _count(self, message: Message, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.count(message.queue, outcome)

    # -- handler runs (handler threads) ---------------------------------------------------

    def handler_started(self, message: Message) -> None:
        """In the thread (or task) that runs the handler, right before it runs."""
        if self.metrics is not None:
            self.metrics.started(message.queue)
        try:
            self.tracing.started(message)
        except Exception:  # a tracing SDK's error must not cost the message its run
            logger.exception("could not start the span of message %s", message.id)

    def handler_finished(self, message: Message, seconds: float, outcome: Outcome | None = None) -> None:
        """In the same thread (or task), right after; ``outcome`` is what the run asks for."""
        if self.metrics is not None:
            self.metrics.finished(message.queue, seconds)
        try:
            self.tracing.finished(
                message, outcome.action if outcome else None, outcome.error if outcome else None
            )
        except Exception:
            logger.exception("could not end the span of message %s", message.id)

    # -- outcomes as the database recorded them (control thread) --------------------------

    def acked(self, message: Message) -> None:
        self._count(message, "acked")

    def failed(self, outcome: Outcome, result: Any) -> None:
        """A fail call returned ``result``: ``"dead"`` or the retry it scheduled."""
        message = outcome.message
        if result != "dead":
            self._count(message, "retried")
            return
        self._count(message, "dead")
        reason = {"discard": "discarded", "timeout": "timeout", "cancelled": "cancelled"}.get(
            outcome.action, "failed"
        )
        if message.cancel_requested and reason != "discarded":
            reason = "cancelled"  # what lonnymq_fail_v2 records for a cancelled message
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

    def lease_lost(self, message: Message) -> None:
        self._count(message, "lease_lost")

    def timed_out(self, message: Message) -> None:
        self._count(message, "timed_out")

    def cancelled(self, message: Message) -> None:
        self._count(message, "cancelled")
