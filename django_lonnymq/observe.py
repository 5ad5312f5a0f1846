"""What a worker tells the outside about its messages: log lines, per-worker metrics, and
the dashboard's samples (sampling.py). The worker calls one hook per event; the logic lives here.

Outcomes (the ``outcome`` label of ``lonnymq_worker_messages_total``): ``acked``,
``retried``, ``dead``, ``timed_out``, ``cancelled``, ``lease_lost``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .message import Message
    from .metrics import WorkerMetrics
    from .worker import Outcome, Worker

logger = logging.getLogger("django_lonnymq.worker")

OUTCOMES = ("acked", "retried", "dead", "timed_out", "cancelled", "lease_lost")


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else "-"


class Observer:
    """The hooks of one worker. ``metrics`` is None unless the worker serves metrics."""

    def __init__(self, worker: Worker, metrics: WorkerMetrics | None = None):
        from .sampling import Sampler

        self.worker = worker
        self.metrics = metrics
        self.sampler = Sampler(worker)

    def tick(self) -> None:
        """The worker's maintenance step (control thread, its connection): samples when due."""
        self.sampler.tick()

    def _count(self, message: Message, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.count(message.queue, outcome)

    # -- handler runs (handler threads) ---------------------------------------------------

    def handler_started(self, message: Message) -> None:
        if self.metrics is not None:
            self.metrics.started(message.queue)

    def handler_finished(self, message: Message, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.finished(message.queue, seconds)

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
