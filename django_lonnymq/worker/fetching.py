"""Fetching: lease batches across the worker's queues, rotating which goes first, and hand
them to the handlers; how long to sleep when nothing was ready.

A queue whose dequeue fails on a healthy connection is backed off alone: the others are
served meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from .. import statements
from ..message import Message
from .batches import Collector
from .completion import Completion
from .connection import STATEMENT_ERRORS, ControlConnection, backoff, describe_failure
from .handlers import Handlers
from .held import Held
from .housekeeping import Leases
from .lifecycle import lease
from .observer import Observers
from .outcomes import refused
from .progress import Reports
from .stats import Stats

logger = logging.getLogger("django_lonnymq.worker")


class Fetcher:
    """Leases messages of ``queues`` for one worker (named ``name`` in their ``leased_by``)."""

    def __init__(
        self,
        connection: ControlConnection,
        queues: Sequence[str],
        *,
        name: str,
        lease_ms: int,
        poll_interval: float,
        held: Held,
        handlers: Handlers,
        completion: Completion,
        leases: Leases,
        reports: Reports,
        observers: Observers,
        stats: Stats,
        collector: Collector | None = None,
    ):
        self.connection = connection
        # Batch handlers' queues: what is leased for them is collected into batches.
        self.collector = collector if collector is not None else Collector({}, 1)
        self.queues = list(queues)
        self.name = name
        self.lease_ms = lease_ms
        self.poll_interval = poll_interval
        self.held = held
        self.handlers = handlers
        self.completion = completion
        self.leases = leases
        self.reports = reports
        self.observers = observers
        self.stats = stats
        self._turn = 0
        self._idle_backoff = 0.0
        # The last fetch got some messages but fewer than it asked for: the queues held no more
        # that were ready for this worker when it ran.
        self.came_short = False
        # A queue whose dequeue fails waits until then (monotonic), others are served meanwhile.
        self._retry_at: dict[str, float] = {}
        self._backoff: dict[str, float] = {}

    def fetch(self, want: int, most: int | None = None) -> int:
        """Lease work for up to ``want`` handler calls across the queues (rotating which goes
        first): a message each, or for a batch handler's queue a full batch each (within
        its collector's room; ``most``: at most that many messages in all, a worker's
        ``max_messages``). Returns the calls started (a batch still being collected counts
        as one)."""
        got = 0
        asked = leased = 0  # messages, across batch handlers' queues
        taken = 0  # messages, across all the queues
        any_batched = False
        order = self.queues[self._turn :] + self.queues[: self._turn]
        self._turn = (self._turn + 1) % len(self.queues)
        now = time.monotonic()
        extend = self.leases.extend_for_handler
        for queue_name in order:
            if got >= want:
                break
            if self._retry_at.get(queue_name, 0.0) > now:
                continue
            batched = self.collector.is_batched(queue_name)
            ask = self.collector.ask(queue_name, want - got) if batched else want - got
            if batched and most is not None:
                ask = min(ask, most - taken)
            collected_only = batched and ask <= 0
            while collected_only and got < want and (oldest := self.collector.take_oldest(queue_name)):
                # The collector is full and threads are free: its oldest batches go now.
                self._dispatch([oldest])
                got += 1
            any_batched = any_batched or batched
            if ask <= 0:
                continue
            try:
                # Steps, sleeps and waits run on Django's connection to the queue's database.
                messages = lease(
                    self.connection,
                    queue_name,
                    ask,
                    worker=self.name,
                    lease_ms=self.lease_ms,
                    using=self.leases.using,
                    extend=extend,
                    report=self.reports.report,
                )
            except STATEMENT_ERRORS as exc:
                if self.connection.is_lost(exc):
                    raise
                self._dequeue_failed(queue_name, exc)
                continue
            if queue_name in self._backoff:
                logger.warning("dequeue of queue %s works again", queue_name)
                del self._backoff[queue_name]
                self._retry_at.pop(queue_name, None)
            if batched:
                asked += ask
                leased += len(messages)
            taken += len(messages)
            if not messages:
                continue
            self.observers.fetched(messages)
            self.held.add(messages, collecting=batched)
            self.stats.fetched += len(messages)
            runnable: list[Message] = []
            for message in messages:
                outcome = refused(message)
                if outcome is not None:
                    self.completion.post(outcome)
                elif batched:
                    runnable.append(message)
                else:
                    self.handlers.submit(message)
            if batched:
                full = self.collector.add(queue_name, runnable)
                self._dispatch(full)
                got += max(len(full), 1)
            else:
                got += len(messages)
        if got:
            self.leases.fetched()
            self._idle_backoff = 0.0
        # A batch queue's call takes many messages: short when it leased fewer than asked.
        self.came_short = 0 < leased < asked if any_batched else 0 < got < want
        return got

    def dispatch_due(self) -> None:
        """Hand the batches whose wait ended to the handlers."""
        if len(self.collector):
            self._dispatch(self.collector.due(time.monotonic()))

    def _dispatch(self, batches: list[list[Message]]) -> None:
        for batch in batches:
            kept = self.held.dispatch(batch)
            if kept:
                self.handlers.submit_batch(kept)

    def _dequeue_failed(self, queue_name: str, exc: BaseException) -> None:
        """One queue's dequeue fails on a healthy connection: back that queue off alone."""
        self.stats.statement_errors += 1
        delay = self._backoff[queue_name] = backoff(self._backoff.get(queue_name, 0.0))
        self._retry_at[queue_name] = time.monotonic() + delay
        kind, detail = describe_failure(exc)
        logger.error(
            "dequeue of queue %s %s (%s); trying it again in %.1fs, other queues go on",
            queue_name,
            kind,
            detail,
            delay,
        )

    def pending(self) -> bool:
        """Burst mode: does any queue still hold a message that is ready or in flight?"""
        return bool(statements.pending(queues=self.queues, on=self.connection))

    def idle_wait(self) -> float:
        """Sleep until the earliest channel turn, capped by the poll interval.

        A turn that is already due while our dequeue found nothing means other workers hold
        those channels: back off (5 ms, doubling to 100 ms; reset by the next successful
        fetch) instead of spinning on 1 ms waits that burn the CPU the holders need.
        """
        if self._retry_at:
            now = time.monotonic()
            if all(self._retry_at.get(q, 0.0) > now for q in self.queues):
                return min(min(self._retry_at.values()) - now, self.poll_interval)
        due_ms = statements.next_due(queues=self.queues, on=self.connection)
        if due_ms is None:
            return self.poll_interval
        if due_ms <= 0:
            self._idle_backoff = min(self._idle_backoff * 2, 0.1) if self._idle_backoff else 0.005
            return self._idle_backoff
        return min(max(due_ms / 1000, 0.001), self.poll_interval)
