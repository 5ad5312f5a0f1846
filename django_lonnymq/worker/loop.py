"""The worker: fetch leased batches, run handlers on threads, ack in batches, keep leases alive.

One control thread owns one database connection (:mod:`.connection`) and does every queue
call: it fetches (:mod:`.fetching`), records outcomes (:mod:`.completion`), keeps leases and
the worker's row (:mod:`.housekeeping`) and sleeps in between (:mod:`.waiting`). Handler
threads and the event loop run user code (:mod:`.handlers`, under the timeout and cancel
control of :mod:`.running`); what a run comes to is :mod:`.outcomes`. The outside observes
it all through :mod:`.observer`. This module composes the parts and runs the loop.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from ..bounds import MAX_BATCH, MIN_LEASE
from ..conf import settings, to_ms
from ..exceptions import InvalidArgument
from ..registry import batch_of, get_handler, is_async, timeout_of
from ..routing import by_database
from . import duties
from .batches import Collector
from .completion import Completion
from .connection import STATEMENT_ERRORS, ControlConnection
from .fetching import Fetcher
from .handlers import Handlers
from .held import Held
from .housekeeping import Housekeeping, Leases, Presence, Samples
from .observer import LogObserver, Observers
from .progress import Reports
from .receivers import ReceiverThread
from .running import Control
from .stats import Stats
from .stopping import StopOnSignal
from .waiting import Waiter

logger = logging.getLogger("django_lonnymq.worker")

# After a fetch that got fewer messages than it asked for, the longest the worker waits for a
# finished handler or a notification before it fetches again (seconds): the first step of the
# backoff after an empty fetch (Fetcher.idle_wait), so a message that becomes ready unnotified
# (a delay or a rate's token coming due) waits no longer than it would after an empty fetch.
MIN_LEASE_MS = int(MIN_LEASE.total_seconds() * 1000)
SHORT_FETCH_WAIT = 0.005

# The longest a leased message waits in a worker's local buffer (``batch_size`` above
# ``concurrency``) for a free handler thread before the worker gives it back, ready at once for
# any worker with a free thread (and held back by a queue paused meanwhile). Seconds.
BUFFER_HOLD = 1.0
# After the buffer gave a message back, the worker fetches only for its idle threads for this
# long (seconds): handlers too slow for the buffer do not lease and give back every second.
BUFFER_PAUSE = 10.0


class Worker(StopOnSignal):
    """Serves one or more queues until stopped, ``max_messages`` ran, or (``burst``) idle."""

    def __init__(
        self,
        queues: Sequence[str],
        *,
        concurrency: int = 1,
        batch_size: int | None = None,
        lease: timedelta | float | None = None,
        burst: bool = False,
        max_messages: int | None = None,
        using: str | None = None,
        shutdown_timeout: timedelta | float | None = None,
        name: str | None = None,
        housekeeping: bool = True,
    ):
        """``housekeeping=False`` (``testing.drain()``): no worker row, no periodic ticks, no
        dashboard samples, no VACUUM, so a test that drains in-process leaves none of them behind."""
        if not queues:
            raise InvalidArgument("queues", "must name at least one queue", list(queues))
        if concurrency < 1:
            raise InvalidArgument("concurrency", "must be at least 1", concurrency)
        self.queues = list(dict.fromkeys(queues))
        self.handlers = {q: get_handler(q) for q in self.queues}  # NoHandler before any work
        self.async_queues = {q for q, func in self.handlers.items() if is_async(func)}
        self.concurrency = concurrency
        self.batch_size = batch_size or concurrency
        if not 1 <= self.batch_size <= MAX_BATCH:
            raise InvalidArgument("batch_size", f"must be between 1 and {MAX_BATCH}", self.batch_size)
        # Messages held at once: running plus leased and waiting for a free handler thread.
        self.capacity = max(concurrency, self.batch_size)
        self.lease_ms = to_ms(lease) if lease is not None else settings.ms("LEASE")
        if self.lease_ms < MIN_LEASE_MS:
            raise InvalidArgument("lease", "must be at least 1 second", lease)
        self.burst = burst
        self.max_messages = max_messages
        self.using = using or self._database_of(self.queues)
        self.shutdown_timeout = (
            to_ms(shutdown_timeout) / 1000
            if shutdown_timeout is not None
            else settings.ms("SHUTDOWN_TIMEOUT") / 1000
        )
        self.name = name if name is not None else f"{socket.gethostname()}:{os.getpid()}"
        self.poll_interval = settings.ms("POLL_INTERVAL") / 1000
        self.stats = Stats()
        # Non-zero when the worker stops because it cannot go on (a handler thread died):
        # the command exits with it, so a supervisor restarts the worker.
        self.exit_code = 0
        # Until then (monotonic), fetch only for idle threads: the buffer gave a message back.
        self._buffer_paused_until = 0.0
        self._stopping = threading.Event()
        self._forced = threading.Event()

        # The parts, each given what it needs.
        self.connection = ControlConnection(self.using, self.name, self.stats, self._stopping)
        self.held = Held()
        self.waiter = Waiter()
        self.observers = Observers(passes=self.connection.is_lost)
        self.observers.add(LogObserver())
        for observer in duties.build_observers(self.connection, self.held):  # the spans, from ready()
            self.observers.add(observer)
        # Signal receivers run on a thread of their own, not on this one (leases, acks).
        self.observers.add(ReceiverThread(drain_timeout=self.shutdown_timeout))
        if housekeeping:
            self.observers.add(Samples(self.connection))
        self.control = Control(
            {q: timeout_of(q) for q in self.queues},
            cancel_grace=settings.ms("CANCEL_GRACE") / 1000,
            interrupt_grace=settings.ms("INTERRUPT_GRACE") / 1000,
        )
        # message.progress(): reports kept in memory, written at most every PROGRESS_INTERVAL.
        self.reports = Reports(self.connection, self.waiter, prune=housekeeping)
        self.completion = Completion(
            self.connection, self.held, self.observers, self.stats, self.waiter, self.reports
        )
        self.runners = Handlers(
            self.handlers,
            self.async_queues,
            concurrency=concurrency,
            control=self.control,
            held=self.held,
            observers=self.observers,
            completion=self.completion,
            stats=self.stats,
        )
        leases = self.leases = Leases(self.connection, self.held, self.control, self.lease_ms, self.using)
        self.presence = Presence(
            self.connection,
            name=self.name,
            queues=self.queues,
            concurrency=concurrency,
            held=self.held,
            stats=self.stats,
            renamed=self._renamed,
        )
        self.housekeeping = Housekeeping(
            self.connection,
            leases=leases,
            reports=self.reports,
            presence=self.presence,
            observers=self.observers,
            queues=self.queues,
            poll_interval=self.poll_interval,
            stats=self.stats,
            enabled=housekeeping,
        )
        # Batch handlers' queues: their messages are collected into batches of one channel.
        specs = {q: spec for q in self.queues if (spec := batch_of(q)) is not None}
        self.collector = Collector(specs, concurrency)
        self.fetcher = Fetcher(
            self.connection,
            self.queues,
            name=self.name,
            lease_ms=self.lease_ms,
            poll_interval=self.poll_interval,
            held=self.held,
            handlers=self.runners,
            completion=self.completion,
            leases=leases,
            reports=self.reports,
            observers=self.observers,
            stats=self.stats,
            collector=self.collector,
        )

    @staticmethod
    def _database_of(queues: Sequence[str]) -> str:
        """The one database of ``queues`` (``LONNYMQ_QUEUE_DATABASES``); several need a
        :class:`~.group.WorkerGroup` (``run_queue_worker`` builds one)."""
        groups = by_database(queues)
        if len(groups) > 1:
            raise InvalidArgument(
                "queues",
                "live on several databases: serve them with WorkerGroup (run_queue_worker does), or pass using=",
                {alias: names for alias, names in groups.items()},
            )
        return next(iter(groups))

    def _renamed(self, name: str) -> None:
        """The worker's row took another name (``name#2``): lease under it from now on."""
        self.name = self.connection.name = self.fetcher.name = name

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self, *_: Any) -> None:
        """Stop fetching; running handlers finish (up to the shutdown timeout). Signal-safe."""
        self._stopping.set()
        self.waiter.wake()

    def force_stop(self) -> None:
        """Exit at once: release what never started, leave running handlers (their messages
        come back when their leases expire), tell their handlers' ``on_abandon``. Signal-safe."""
        self._forced.set()
        self.stop()

    # Log the start and the stop summary (run_queue_worker prints its own lines instead, so a
    # console shows each once).
    announces = True

    def run(self) -> Stats:
        """Serve until stopped; returns the counters."""
        self.runners.start()
        (logger.info if self.announces else logger.debug)(
            "worker %s serving %s (concurrency=%d, batch=%d, lease=%.1fs)",
            self.name,
            ", ".join(self.queues),
            self.concurrency,
            self.batch_size,
            self.lease_ms / 1000,
        )
        try:
            self._loop()
        finally:
            self._shutdown()
        (logger.info if self.announces else logger.debug)(
            "worker %s stopped: %s", self.name, self.stats.summary()
        )
        return self.stats

    def _loop(self) -> None:
        connection, held, completion, fetcher = self.connection, self.held, self.completion, self.fetcher
        while True:
            if not connection.ensure():  # stopping while the database is down
                return
            try:
                self._check_handler_threads()
                completion.flush()
                self._supervise()
                fetcher.dispatch_due()
                if self._stopping.is_set():
                    return  # _shutdown lets running handlers finish, bounded
                if self._quota_used():
                    if not held.count():
                        return
                    self._wait(self._due_in())
                    self._maintain()
                    continue
                self._give_back_stale()
                # Fetch whenever a handler thread would otherwise sit idle: fewer calls held
                # (running, or leased and waiting; a batch handler's batch is one call) than
                # threads. A batch above the concurrency fills a local buffer for the next free
                # threads (its leases extended like running ones), which gives back what waits
                # longer than BUFFER_HOLD.
                load = held.load()
                free = self.capacity - load
                wanted = load < self.concurrency
                if time.monotonic() < self._buffer_paused_until:
                    free = self.concurrency - load
                quota = self._quota_left()
                # ``most`` bounds messages (a batch call leases many) only under --max-messages.
                most = quota if self.max_messages is not None else None
                got = fetcher.fetch(min(free, self.batch_size, quota), most=most) if wanted else 0
                # Housekeeping after the fetch: a message that woke us starts before it.
                self._maintain()
                if got:
                    if fetcher.came_short:
                        # Fewer were ready than asked: a fetch now would most likely come back
                        # empty and hold up the ack of what just started (a workflow's root,
                        # whose ack releases its children). Wait for a finished handler or a
                        # notification first, at most as long as the first idle backoff.
                        self._wait(min(self._due_in(), SHORT_FETCH_WAIT))
                    continue
                if wanted:
                    self.stats.empty_fetches += 1
                if self.burst and not held.count() and not completion.pending() and not fetcher.pending():
                    return
                wait = self._due_in()
                if wanted:
                    wait = min(wait, fetcher.idle_wait())
                self._wait(wait)
                connection.succeeded()
            except STATEMENT_ERRORS as exc:
                connection.failed("worker loop", exc)

    def _give_back_stale(self) -> None:
        """Release buffered messages that waited past :data:`BUFFER_HOLD` for a thread: the
        buffer never sits on work another worker's free threads could run (nor on a queue
        paused since the fetch). No attempt is spent; they are due again at once."""
        if not self.held.waiting():
            return
        stale = self.held.take_stale(time.monotonic() - BUFFER_HOLD)
        if stale:
            self._buffer_paused_until = time.monotonic() + BUFFER_PAUSE
            self.completion.release(stale)
            logger.debug(
                "gave back %d message(s) that waited %.1fs for a free thread", len(stale), BUFFER_HOLD
            )

    def _quota_used(self) -> bool:
        return self.max_messages is not None and self.stats.fetched >= self.max_messages

    def _quota_left(self) -> int:
        if self.max_messages is None:
            return self.batch_size
        return max(self.max_messages - self.stats.fetched, 0)

    def _wait(self, timeout: float) -> None:
        """Sleep until a notification, a finished handler, a stop request, or ``timeout``."""
        self.waiter.wait(timeout, self.connection.conn, self.completion.pending)
        if self.waiter.take_cancels():
            self.leases.due_now()

    def _maintain(self) -> None:
        self.housekeeping.tick(self._stopping.is_set())

    def _due_in(self) -> float:
        """Until the next heartbeat, reap or interruption is due, capped by the poll interval."""
        now = time.monotonic()
        waits = [self.poll_interval, *self.housekeeping.due_in(now)]
        oldest = self.held.oldest_waiting() if self.held.waiting() else None
        if oldest is not None:
            waits.append(oldest + BUFFER_HOLD - now)
        batch_due = self.collector.next_due()
        if batch_due is not None:
            waits.append(batch_due - now)
        interrupt_due = self.control.due_in()
        if interrupt_due is not None:
            waits.append(interrupt_due)
        return max(min(waits), 0.0)

    def _check_handler_threads(self) -> None:
        """A handler thread that died anyway (nothing should kill one) is noticed here: the
        worker stops fetching, lets the others finish, releases what never started and exits
        with status 1, so its supervisor starts a fresh one."""
        if self.exit_code or self._stopping.is_set():
            return
        dead = self.runners.dead()
        if dead:
            logger.critical("handler thread(s) %s died; stopping the worker (exit status 1)", ", ".join(dead))
            self.exit_code = 1
            self.stop()

    def _supervise(self) -> None:
        """Interrupt handlers past their timeout or cancel grace; abandon those that ignore it.

        An abandoned handler keeps its thread (nothing can stop it), but its lease is no
        longer extended, so its message comes back through the reaper; the worker stops
        fetching, lets the other handlers finish and exits with status 1 for its supervisor
        to start a fresh process.
        """
        abandoned = self.control.tick()
        if not abandoned:
            return
        self.held.drop(message.id for message in abandoned)
        self.stats.abandoned += len(abandoned)
        for message in abandoned:
            logger.critical(
                "handler of message %s (%s) ignored its interruption for %gs; abandoning it: its lease "
                "will expire and the message come back; this worker stops (exit status 1)",
                message.id,
                message.queue,
                self.control.interrupt_grace,
            )
            self.runners.on_abandon(message)
        self.exit_code = self.exit_code or 1
        self.stop()

    # -- shutdown ------------------------------------------------------------------------

    def _abandon_running(self) -> None:
        """A forced exit leaves running handlers behind: exit status 1, and each handler's
        ``on_abandon(message)`` (if it has one) records what it needs to."""
        self.exit_code = self.exit_code or 1
        running = self.held.snapshot()
        if running:
            logger.warning(
                "exiting at once with %d handler(s) running; their messages will be redelivered after the lease",
                len(running),
            )
        for message in running:
            self.runners.on_abandon(message)

    def _shutdown(self) -> None:
        """Let running handlers finish (bounded), release what never started, flush acks."""
        connection = self.connection
        deadline = time.monotonic() + self.shutdown_timeout
        not_started = self.held.take_waiting()
        self.collector.clear()
        while self.held.count() and time.monotonic() < deadline and not self._forced.is_set():
            try:
                connection.ensure()
                self.completion.flush()
                self._supervise()
                if self.held.count():
                    self._wait(min(0.1, max(deadline - time.monotonic(), 0)))
                    self._maintain()
            except STATEMENT_ERRORS as exc:
                connection.lost(exc)
                if self._stopping.is_set() and time.monotonic() >= deadline:
                    break
        try:
            connection.ensure()
            if connection.conn is not None:
                self.completion.flush()
                self.completion.release(not_started)
                self.presence.stopped()
        except STATEMENT_ERRORS as exc:
            logger.warning("could not flush on shutdown (%s); leases will expire and be redelivered", exc)
        if self._forced.is_set():
            self._abandon_running()
        elif self.held.count():
            logger.warning(
                "%d handler(s) still running after %.0fs; their messages will be redelivered after the lease",
                self.held.count(),
                self.shutdown_timeout,
            )
        self.runners.stop()
        self.observers.stopped()
        connection.close()
        self.waiter.close()
