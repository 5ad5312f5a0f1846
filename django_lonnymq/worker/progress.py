"""Handlers' progress reports (``message.progress()``), written with bounded writes.

A handler thread's report only replaces the message's waiting report in memory (a dict
under a lock: no database call on the handler's thread, none in its transaction). The
control thread writes every waiting report in one statement at most every
``LONNYMQ_PROGRESS_INTERVAL``, and a finished message's last report just before its outcome is
recorded: a handler that reports 1,000 times a second costs its worker about two writes a
second. Rows older than ``LONNYMQ_PROGRESS_RETENTION`` whose message is gone are pruned here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from .. import statements
from ..conf import settings
from ..message import Message
from ..progress import Progress
from .connection import STATEMENT_ERRORS, ControlConnection
from .lifecycle import record_progress
from .waiting import Waiter

logger = logging.getLogger("django_lonnymq.worker")

PRUNE_INTERVAL = 60.0
PRUNE_BATCH = 1000


class Reports:
    """The reports waiting to be written, and the control thread's writes of them."""

    def __init__(self, connection: ControlConnection, waiter: Waiter, *, prune: bool):
        self.connection = connection
        self.waiter = waiter
        self.interval = settings.ms("PROGRESS_INTERVAL") / 1000
        self.prune = prune
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[Message, Progress]] = {}
        self.next_at = 0.0  # 0: nothing waiting
        self._written_at = float("-inf")
        self._prune_at = 0.0
        self.writes = 0  # statements run (each writes every report waiting then)

    def report(self, message: Message, progress: Progress) -> None:
        """A handler's report (its thread): replaces the message's waiting one."""
        with self._lock:
            first = not self._waiting
            self._waiting[message.id] = (message, progress)
            if first:
                self.next_at = max(time.monotonic(), self._written_at + self.interval)
        if first and self.waiter.sleeping:
            self.waiter.nudge()  # the control thread recomputes its wait with next_at

    def tick(self, now: float) -> None:
        if self.next_at and now >= self.next_at:
            self._write(None)
        if self.prune and now >= self._prune_at:
            self._prune(now)

    def finished(self, messages: Iterable[Message]) -> None:
        """Write the waiting reports of these messages, whose outcome is about to be recorded."""
        if self._waiting:
            self._write({m.id for m in messages})

    def _write(self, only: set[int] | None) -> None:
        with self._lock:
            if only is None:
                taken = list(self._waiting.values())
                self._waiting.clear()
                # Under the lock: a report that comes while this write runs waits an interval.
                self._written_at = time.monotonic()
            else:
                taken = [self._waiting.pop(i) for i in only if i in self._waiting]
            if not self._waiting:
                self.next_at = 0.0
        if not taken:
            return
        try:
            record_progress(self.connection, taken)
        except STATEMENT_ERRORS as exc:
            if self.connection.is_lost(exc):
                self._put_back(taken)  # written after reconnecting
                raise
            logger.error("could not record the progress of %d message(s): %r", len(taken), exc)
            return
        self.writes += 1

    def _put_back(self, taken: list[tuple[Message, Progress]]) -> None:
        with self._lock:
            for message, progress in taken:
                self._waiting.setdefault(message.id, (message, progress))  # a newer one wins
            if self._waiting and not self.next_at:
                self.next_at = time.monotonic() + self.interval

    def _prune(self, now: float) -> None:
        self._prune_at = now + PRUNE_INTERVAL
        pruned = self.connection.quietly(
            "prune old progress reports",
            lambda: [
                statements.progress_prune(
                    retention_ms=settings.ms("PROGRESS_RETENTION"), limit=PRUNE_BATCH, on=self.connection
                )
            ],
        )
        if pruned and int(pruned[0] or 0) >= PRUNE_BATCH:
            self._prune_at = now  # more to prune: again at the next step
