"""The worker: fetch leased batches, run handlers on threads, ack in batches, keep leases alive.

One control thread owns one database connection (autocommit, LISTENing for wake-ups) and
does every queue call: dequeue, ack, fail, extend, reap. Handler threads run user code with
Django's own per-thread connections; ``async def`` handlers run as tasks on one event-loop
thread. The control thread sleeps on the connection's socket and a self-pipe at once, so a
notification or a finished handler wakes it within milliseconds. Timeouts, cancels of
running messages and abandoning a stuck handler are in :mod:`django_lonnymq.running`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue as queue_mod
import random
import select
import signal
import socket
import threading
import time
import traceback
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg
from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections
from psycopg.types.json import set_json_loads

from . import schedules, sql
from .conf import settings, to_ms
from .exceptions import (
    Discard,
    Interrupted,
    InvalidArgument,
    LeaseLost,
    LonnyMQError,
    MessageNotFound,
    Retry,
    SchemaMissing,
    sql_errors,
)
from .message import Message
from .observe import Observer
from .registry import get_handler, is_async, timeout_of
from .running import TIMEOUT, Control, EventLoopThread
from .workers import Presence

logger = logging.getLogger("django_lonnymq.worker")

_DB_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)
# Any error a statement can raise: a lost connection is told apart by the connection's state.
_STATEMENT_ERRORS = (psycopg.Error, LonnyMQError)
# Back-off after a statement fails for a reason other than a lost connection.
_ERROR_BACKOFF_FIRST = 0.5
_ERROR_BACKOFF_MAX = 30.0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _root_error(exc: BaseException) -> BaseException:
    """The database error under a typed one; a missing schema keeps its hint (migrate)."""
    if isinstance(exc, LonnyMQError) and exc.__cause__ and not isinstance(exc, SchemaMissing):
        return exc.__cause__
    return exc


_json_decoder = json.JSONDecoder()


def _decode_json(data: str | bytes) -> Any:
    return _json_decoder.decode(data.decode() if isinstance(data, bytes) else data)


def _array_literal(values: Iterable[object]) -> str:
    """A PostgreSQL array literal of ints or UUIDs (nothing to quote): the ack's arrays as
    one string each, where psycopg's list adapter cost more than the statement's parsing."""
    return "{" + ",".join(map(str, values)) + "}"


def _backoff(previous: float) -> float:
    """The next back-off: doubled, capped, with up to 25% jitter so workers do not align."""
    base = min(previous * 2, _ERROR_BACKOFF_MAX) if previous else _ERROR_BACKOFF_FIRST
    return base * random.uniform(0.75, 1.0)


@dataclass
class Outcome:
    """What a handler's run asks for: ack, retry (with optional delay), or discard."""

    message: Message
    action: str  # "ack" | "fail" | "retry" | "discard" | "timeout" | "cancelled"
    error: str | None = None
    delay_ms: int | None = None
    # Sent once already when the connection dropped: that call may have committed.
    resent: bool = False


@dataclass
class Stats:
    """Counters a worker reports when it stops (and tests and benchmarks read)."""

    fetched: int = 0
    acked: int = 0
    retried: int = 0
    dead: int = 0
    lease_lost: int = 0
    empty_fetches: int = 0
    reaped: int = 0
    reconnects: int = 0
    released: int = 0
    statement_errors: int = 0
    handler_crashes: int = 0
    timed_out: int = 0
    cancelled: int = 0
    abandoned: int = 0
    started_at: float = field(default_factory=time.monotonic)

    def summary(self) -> str:
        elapsed = max(time.monotonic() - self.started_at, 1e-9)
        return (
            f"fetched={self.fetched} acked={self.acked} retried={self.retried} dead={self.dead} "
            f"lease_lost={self.lease_lost} released={self.released} reaped={self.reaped} "
            f"empty_fetches={self.empty_fetches} reconnects={self.reconnects} "
            f"statement_errors={self.statement_errors} timed_out={self.timed_out} "
            f"cancelled={self.cancelled} abandoned={self.abandoned} "
            f"elapsed={elapsed:.1f}s rate={self.acked / elapsed:.1f}/s"
        )


def close_old_connections_after_interrupt() -> None:
    """Close this thread's connections after an interruption: it may have landed in the
    middle of the driver's own code, leaving a connection in a state nobody should reuse."""
    for conn in connections.all(initialized_only=True):
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - a broken connection is what is being dropped
            pass


def short_repr(exc: BaseException) -> str:
    """repr() of a handler's exception, or its type when even that raises."""
    try:
        return repr(exc)
    except Exception:
        return f"<{type(exc).__name__} that cannot be shown>"


# The reason lonnymq_fail_v2 records for each outcome that is not an ack.
_FAIL_REASONS = {
    "fail": "failed",
    "retry": "failed",
    "discard": "discarded",
    "timeout": "timeout",
    "cancelled": "cancelled",
}


def describe_exception(exc: BaseException) -> str:
    """The error text stored with a failed message: type, message and a short traceback."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=8))
    return text[-4000:]


class Worker:
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
        dashboard samples, so a test that drains in-process leaves none of them behind."""
        if not queues:
            raise InvalidArgument("queues", "must name at least one queue", list(queues))
        if concurrency < 1:
            raise InvalidArgument("concurrency", "must be at least 1", concurrency)
        self.queues = list(dict.fromkeys(queues))
        self.handlers = {q: get_handler(q) for q in self.queues}  # NoHandler before any work
        self.async_queues = {q for q, func in self.handlers.items() if is_async(func)}
        self.concurrency = concurrency
        self.batch_size = batch_size or concurrency
        if not 1 <= self.batch_size <= 10_000:
            raise InvalidArgument("batch_size", "must be between 1 and 10000", self.batch_size)
        # Messages held at once: running plus leased and waiting for a free handler thread.
        self.capacity = max(concurrency, self.batch_size)
        self.lease_ms = to_ms(lease) if lease is not None else settings.ms("LEASE")
        if self.lease_ms < 1000:
            raise InvalidArgument("lease", "must be at least 1 second", lease)
        self.burst = burst
        self.max_messages = max_messages
        self.using = using or settings.DATABASE
        self.shutdown_timeout = (
            to_ms(shutdown_timeout) / 1000
            if shutdown_timeout is not None
            else settings.ms("SHUTDOWN_TIMEOUT") / 1000
        )
        self.name = name if name is not None else f"{socket.gethostname()}:{os.getpid()}"
        self.presence = Presence(self)  # its lonnymq_worker row (checks the name)
        self.housekeeping = housekeeping
        self.observer = Observer(self)  # log lines, metrics, samples (observe.py)
        self.poll_interval = settings.ms("POLL_INTERVAL") / 1000
        self.reap_interval = settings.ms("REAP_INTERVAL") / 1000
        self.stats = Stats()
        # Periodic schedules of these queues: synced at the first maintenance, then ticked.
        self._ticker = schedules.Ticker(self.queues, interval=self.poll_interval)
        self.control = Control(
            {q: timeout_of(q) for q in self.queues},
            cancel_grace=settings.ms("CANCEL_GRACE") / 1000,
            interrupt_grace=settings.ms("INTERRUPT_GRACE") / 1000,
        )
        self._event_loop: EventLoopThread | None = None
        self._async_connections_due = 0.0

        self._stopping = threading.Event()
        self._forced = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        # SimpleQueue: put and get in C, a few microseconds less per message than queue.Queue.
        self._jobs: queue_mod.SimpleQueue[Message | None] = queue_mod.SimpleQueue()
        self._outcomes: queue_mod.SimpleQueue[Outcome] = queue_mod.SimpleQueue()
        # Set while the control thread sleeps in _wait: only then does a finished handler
        # write to the wake-up pipe (a write per message cost more than the no-op handler).
        self._sleeping = False
        self._running: dict[int, Message] = {}
        self._started: set[int] = set()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._threads: list[threading.Thread] = []
        # The message each handler thread runs now (by thread name), for a thread that dies.
        self._current: dict[str, Message] = {}
        self._next_reap = 0.0
        self._next_extend = 0.0
        self._queue_turn = 0
        self._backoff = 0.0
        # A queue whose dequeue fails waits until then (monotonic), others are served meanwhile.
        self._queue_retry_at: dict[str, float] = {}
        self._queue_backoff: dict[str, float] = {}
        self._error_backoff = 0.0
        # Non-zero when the worker stops because it cannot go on (a handler thread died):
        # the command exits with it, so a supervisor restarts the worker.
        self.exit_code = 0

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self, *_: Any) -> None:
        """Stop fetching; running handlers finish (up to the shutdown timeout). Signal-safe."""
        self._stopping.set()
        self._wake()

    def force_stop(self) -> None:
        """Exit at once: release what never started, leave running handlers (their messages
        come back when their leases expire), tell their handlers' ``on_abandon``. Signal-safe."""
        self._forced.set()
        self.stop()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self._stopping.is_set():
            logger.warning("received %s again: exiting at once", signal.Signals(signum).name)
            self.force_stop()
        else:
            logger.warning(
                "received %s: letting running handlers finish (up to %gs); send it again to exit at once",
                signal.Signals(signum).name,
                self.shutdown_timeout,
            )
            self.stop()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def run(self) -> Stats:
        """Serve until stopped; returns the counters."""
        if set(self.queues) - self.async_queues:
            for index in range(self.concurrency):
                thread = threading.Thread(
                    target=self._handler_loop, name=f"lonnymq-handler-{index}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        if self.async_queues:
            self._event_loop = EventLoopThread(self.concurrency, self._consume_async)
            self._event_loop.start()
        logger.info(
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
        logger.info("worker %s stopped: %s", self.name, self.stats.summary())
        return self.stats

    def _loop(self) -> None:
        while True:
            self._ensure_connected()
            if self._conn is None:  # stopping while the database is down
                return
            try:
                self._check_handler_threads()
                self._flush_outcomes()
                self._supervise()
                if self._stopping.is_set():
                    return  # _shutdown lets running handlers finish, bounded
                if self._quota_used():
                    if not self._running:
                        return
                    self._wait(self._heartbeat_due_in())
                    self._maintain()
                    continue
                free = self.capacity - len(self._running)
                # Fetch a whole batch at a time: leased messages wait in a local buffer (their
                # leases are extended like running ones, and released on shutdown).
                wanted = free >= max(1, self.batch_size // 2) or not self._running
                got = (
                    self._fetch(min(free, self.batch_size, self._quota_left())) if wanted and free > 0 else 0
                )
                # Housekeeping after the fetch: a message that woke us starts before it.
                self._maintain()
                if got:
                    self._backoff = 0.0
                    continue
                if wanted and free > 0:
                    self.stats.empty_fetches += 1
                if self.burst and not self._running and self._outcomes.empty() and not self._pending_work():
                    return
                wait = self._heartbeat_due_in()
                if wanted and free > 0:
                    wait = min(wait, self._idle_wait())
                self._wait(wait)
                self._error_backoff = 0.0
            except _STATEMENT_ERRORS as exc:
                if self._connection_is_lost(exc):
                    self._lost_connection(exc)
                else:
                    self._statement_failed("worker loop", exc)

    # -- database ----------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        params = dict(connections[self.using].get_connection_params())
        for key in ("cursor_factory", "context", "server_side_binding", "prepare_threshold"):
            params.pop(key, None)
        options = params.pop("options", "") or ""
        # A killed worker's server backend notices the dead client within a second.
        options += " -c client_connection_check_interval=1000 -c lock_timeout=0"
        # The worker's own commits (leases, acks, retries) need not wait for the WAL flush: a
        # server crash can only undo the last few hundred ms of them, which redelivers those
        # messages - what at-least-once already allows. Producers keep their durable commits.
        options += " -c synchronous_commit=off"
        # Its own statement timeout: a role or database default of a few ms would cancel
        # cold-cache dequeues forever.
        options += f" -c statement_timeout={settings.ms('WORKER_STATEMENT_TIMEOUT')}"
        conn = psycopg.connect(
            **params,
            options=options.strip(),
            autocommit=True,
            application_name=f"lonnymq-worker {self.name}"[:63],
            connect_timeout=5,
            # A silent network partition is noticed within about a minute.
            keepalives=1,
            keepalives_idle=30,
            keepalives_interval=10,
            keepalives_count=3,
        )
        # Payloads are UTF-8 text from the server: decoded straight, without json.loads'
        # sniffing of the encoding of bytes (a fifth of the decoding time).
        set_json_loads(_decode_json, conn)
        conn.execute(sql.query("listen"))
        return conn

    def _ensure_connected(self) -> None:
        delay = 0.5
        while self._conn is None or self._conn.closed:
            try:
                self._conn = self._connect()
                if delay > 0.5 or self.stats.reconnects:
                    logger.warning("worker %s connected to the database again", self.name)
                return
            except _DB_ERRORS as exc:
                self._conn = None
                if self._stopping.is_set():
                    return
                logger.error(
                    "database unavailable (%s); retrying in %.1fs",
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                    delay,
                )
                self._stopping.wait(delay)
                delay = min(delay * 2, 30.0)

    def _connection_is_lost(self, exc: BaseException) -> bool:
        """A broken connection is reconnected; any other failed statement is backed off.

        A cancelled statement (statement_timeout, QueryCanceled) and a lock timeout are
        OperationalErrors too, but the connection is fine: reconnecting at once would
        only repeat them, dozens of times a second.
        """
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return True
        if isinstance(exc, psycopg.InterfaceError):
            return True
        root = _root_error(exc)
        if not isinstance(root, psycopg.OperationalError):
            return False
        # The client's own connection errors carry no SQLSTATE; the server's say 08xxx
        # (connection exception) or 57P01-57P03 (shutting down, crashed, starting).
        sqlstate = getattr(root, "sqlstate", None)
        return sqlstate is None or sqlstate.startswith("08") or sqlstate in {"57P01", "57P02", "57P03"}

    def _statement_failed(self, what: str, exc: BaseException) -> None:
        """Log a statement that failed on a healthy connection, then back off."""
        self.stats.statement_errors += 1
        self._error_backoff = _backoff(self._error_backoff)
        root = _root_error(exc)
        sqlstate = getattr(root, "sqlstate", None)
        kind = "was cancelled" if isinstance(root, psycopg.errors.QueryCanceled) else "failed"
        logger.error(
            "%s %s (%s%s: %s); backing off %.1fs",
            what,
            kind,
            type(root).__name__,
            f" {sqlstate}" if sqlstate else "",
            _first_line(root),
            self._error_backoff,
        )
        self._stopping.wait(self._error_backoff)

    def _lost_connection(self, exc: BaseException) -> None:
        logger.warning("lost the database connection (%s); reconnecting", _first_line(exc))
        self.stats.reconnects += 1
        try:
            if self._conn is not None:
                self._conn.close()
        finally:
            self._conn = None

    def _execute(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        assert self._conn is not None
        with sql_errors():
            cursor = self._conn.execute(sql.query(name), params, prepare=True)
            # A statement without a result (DELETE without RETURNING) has no rows to fetch.
            return cursor.fetchall() if cursor.description is not None else []

    def _scalar(self, name: str, params: dict[str, Any]) -> Any:
        rows = self._execute(name, params)
        return rows[0][0] if rows else None

    # -- fetching ------------------------------------------------------------------------

    def _quota_used(self) -> bool:
        return self.max_messages is not None and self.stats.fetched >= self.max_messages

    def _quota_left(self) -> int:
        if self.max_messages is None:
            return self.batch_size
        return max(self.max_messages - self.stats.fetched, 0)

    def _fetch(self, want: int) -> int:
        """Lease up to ``want`` messages across the queues (rotating which goes first)."""
        got = 0
        order = self.queues[self._queue_turn :] + self.queues[: self._queue_turn]
        self._queue_turn = (self._queue_turn + 1) % len(self.queues)
        now = time.monotonic()
        for queue_name in order:
            if got >= want:
                break
            if self._queue_retry_at.get(queue_name, 0.0) > now:
                continue
            try:
                rows = self._execute(
                    "dequeue",
                    {
                        "queue": queue_name,
                        "batch_size": want - got,
                        "lease_ms": self.lease_ms,
                        "worker": self.name,
                        "tolerance_ms": settings.ms("WAKE_TOLERANCE"),
                    },
                )
            except _STATEMENT_ERRORS as exc:
                if self._connection_is_lost(exc):
                    raise
                self._dequeue_failed(queue_name, exc)
                continue
            if queue_name in self._queue_backoff:
                logger.warning("dequeue of queue %s works again", queue_name)
                del self._queue_backoff[queue_name]
                self._queue_retry_at.pop(queue_name, None)
            self.observer.fetched([row[0] for row in rows])
            for row in rows:
                self._dispatch(queue_name, row)
            got += len(rows)
        if got and self._next_extend == 0.0:
            self._next_extend = time.monotonic() + self.lease_ms / 3000
        return got

    def _dequeue_failed(self, queue_name: str, exc: BaseException) -> None:
        """One queue's dequeue fails on a healthy connection: back that queue off alone."""
        self.stats.statement_errors += 1
        delay = self._queue_backoff[queue_name] = _backoff(self._queue_backoff.get(queue_name, 0.0))
        self._queue_retry_at[queue_name] = time.monotonic() + delay
        root = _root_error(exc)
        sqlstate = getattr(root, "sqlstate", None)
        logger.error(
            "dequeue of queue %s %s (%s%s: %s); trying it again in %.1fs, other queues go on",
            queue_name,
            "was cancelled" if isinstance(root, psycopg.errors.QueryCanceled) else "failed",
            type(root).__name__,
            f" {sqlstate}" if sqlstate else "",
            _first_line(root),
            delay,
        )

    def _dispatch(self, queue_name: str, row: tuple[Any, ...]) -> None:
        (
            msg_id,
            channel,
            payload,
            attempts,
            max_attempts,
            priority,
            dedup_key,
            enqueued_at,
            token,
            lease_until,
        ) = row
        message = Message(
            id=msg_id,
            queue=queue_name,
            channel=channel,
            payload=payload,
            attempt=attempts,
            max_attempts=max_attempts,
            enqueued_at=enqueued_at,
            priority=priority,
            dedup_key=dedup_key,
            lease_token=token,
            lease_until_ms=lease_until,
            _extend=self._extend_from_handler,
        )
        with self._lock:
            self._running[msg_id] = message
        self.stats.fetched += 1
        if self._event_loop is not None and queue_name in self.async_queues:
            self._event_loop.submit(message)
        else:
            self._jobs.put(message)

    def _pending_work(self) -> bool:
        """Burst mode: does any queue still hold a message that is ready or in flight?"""
        return bool(self._scalar("pending", {"queues": self.queues}))

    def _idle_wait(self) -> float:
        """Sleep until the earliest channel turn, capped by the poll interval.

        A turn that is already due while our dequeue found nothing means other workers hold
        those channels: back off (5 ms, doubling to 100 ms; reset by the next successful
        fetch) instead of spinning on 1 ms waits that burn the CPU the holders need.
        """
        if self._queue_retry_at:
            now = time.monotonic()
            if all(self._queue_retry_at.get(q, 0.0) > now for q in self.queues):
                return min(min(self._queue_retry_at.values()) - now, self.poll_interval)
        due_ms = self._scalar("next_due", {"queues": self.queues})
        if due_ms is None:
            return self.poll_interval
        if due_ms <= 0:
            self._backoff = min(self._backoff * 2, 0.1) if self._backoff else 0.005
            return self._backoff
        return min(max(due_ms / 1000, 0.001), self.poll_interval)

    # -- waiting -------------------------------------------------------------------------

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def _wait(self, timeout: float) -> None:
        """Sleep until a notification, a finished handler, a stop request, or ``timeout``."""
        # Raised before the outcomes are looked at: a handler that finishes after this look
        # sees the flag and wakes us; one that finished before it is seen here.
        self._sleeping = True
        try:
            self._sleep(timeout)
        finally:
            self._sleeping = False

    def _sleep(self, timeout: float) -> None:
        if not self._outcomes.empty() or timeout <= 0:
            return
        # A notification that arrived while another query ran (ack, next_due, ...) was read
        # off the socket by psycopg and sits in its backlog: select() would not see it and
        # the worker would sleep a whole poll interval with a message ready.
        if self._drain_notifies():
            return
        fds: list[int] = [self._wake_r]
        if self._conn is not None and not self._conn.closed:
            fds.append(self._conn.fileno())
        readable, _, _ = select.select(fds, [], [], timeout)
        if self._wake_r in readable:
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
        if self._conn is not None and len(fds) > 1 and fds[1] in readable:
            for _ in self._conn.notifies(timeout=0):
                pass

    def _drain_notifies(self) -> bool:
        """Consume notifications psycopg already holds; True when there were any."""
        if self._conn is None or self._conn.closed:
            return False
        got = False
        for _ in self._conn.notifies(timeout=0):
            got = True
        return got

    def _heartbeat_due_in(self) -> float:
        """Until the next heartbeat or reap is due, capped by the poll interval."""
        now = time.monotonic()
        waits = [self.poll_interval, self._next_reap - now]
        if self._next_extend:
            waits.append(self._next_extend - now)
        interrupt_due = self.control.due_in()
        if interrupt_due is not None:
            waits.append(interrupt_due)
        return max(min(waits), 0.0)

    # -- handlers ------------------------------------------------------------------------

    def _handler_loop(self) -> None:
        last_finished = 0.0
        while True:
            message = self._jobs.get()
            if message is None:
                return
            with self._lock:
                if message.id not in self._running:  # released before it started
                    continue
                self._started.add(message.id)
            me = threading.current_thread().name
            self._current[me] = message
            began = time.monotonic()
            self.observer.handler_started(message)
            try:
                # Each run ends by dropping broken or expired connections; one more look
                # before the run is only needed after the thread sat idle (CONN_MAX_AGE).
                outcome = self._run_controlled(message, idle=began - last_finished > 1.0)
            except BaseException as exc:  # a bug of ours around the handler, not the handler's
                self.stats.handler_crashes += 1
                logger.critical("handler thread crashed on message %s: %s", message.id, type(exc).__name__)
                outcome = Outcome(
                    message, "fail", error=f"worker error around the handler: {type(exc).__name__}"
                )
            last_finished = time.monotonic()
            self.observer.handler_finished(message, last_finished - began, outcome)
            self._current.pop(me, None)
            self._finished(outcome)

    def _finished(self, outcome: Outcome) -> None:
        """A handler's outcome, for the control thread to record (woken if it sleeps)."""
        self._outcomes.put(outcome)
        if self._sleeping:
            self._sleeping = False  # one wake-up per sleep, not one per message finished
            self._wake()

    def _check_handler_threads(self) -> None:
        """A handler thread that died anyway (nothing should kill one) is noticed here: the
        worker stops fetching, lets the others finish, releases what never started and exits
        with status 1, so its supervisor starts a fresh one."""
        if self.exit_code or self._stopping.is_set():
            return
        dead = [t.name for t in self._threads if not t.is_alive()]
        if self._event_loop is not None and not self._event_loop.is_alive():
            dead.append(self._event_loop.thread.name)
        if dead:
            logger.critical("handler thread(s) %s died; stopping the worker (exit status 1)", ", ".join(dead))
            for name in dead:  # what a dead thread was running fails now, not after its lease
                message = self._current.pop(name, None)
                if message is not None:
                    self._outcomes.put(Outcome(message, "fail", error="the worker's handler thread died"))
            self.exit_code = 1
            self.stop()

    def _run_controlled(self, message: Message, idle: bool = True) -> Outcome:
        """Run a message's handler on this thread under the timeout and cancel control."""
        if message.cancel_requested:
            return Outcome(message, "cancelled", error="cancelled before its handler started")
        outcome, interrupted = self.control.execute(message, lambda: self._run_handler(message, idle))
        if interrupted is not None:
            close_old_connections_after_interrupt()
        return self._after_interrupt(message, outcome, interrupted)

    def _run_handler(self, message: Message, idle: bool = True) -> Outcome:
        if idle:
            close_old_connections()
        try:
            result = self.handlers[message.queue](message)
            if isinstance(result, Awaitable):
                getattr(result, "close", lambda: None)()
                return Outcome(
                    message, "fail", error="the handler returned an awaitable: declare it async def"
                )
            return Outcome(message, "ack")
        except BaseException as exc:  # a failing handler (even SystemExit) must never kill the worker
            return self._outcome_of(message, exc)
        finally:
            close_old_connections()

    def _outcome_of(self, message: Message, exc: BaseException) -> Outcome:
        """What a handler's exception asks for: a retry, a discard, or a failure."""
        if isinstance(exc, Retry):
            try:
                delay_ms = to_ms(exc.delay)
            except Exception as bad:  # a Retry built around the check in Retry.__init__
                return Outcome(message, "fail", error=f"invalid Retry delay {exc.delay!r}: {bad!r}")
            return Outcome(message, "retry", error=exc.reason or "retry requested", delay_ms=delay_ms)
        if isinstance(exc, Discard):
            return Outcome(message, "discard", error=exc.reason)
        if not isinstance(exc, (Interrupted, asyncio.CancelledError)):  # logged by _after_interrupt
            logger.warning(
                "message %s of %s failed on attempt %d: %s",
                message.id,
                message.queue,
                message.attempt,
                short_repr(exc),
            )
        return Outcome(message, "fail", error=describe_exception(exc))

    def _after_interrupt(self, message: Message, outcome: Outcome | None, interrupted: str | None) -> Outcome:
        """A run that was interrupted, or whose message was cancelled while it ran, ends as
        the interruption says whatever the handler did afterwards."""
        if interrupted is None and not message.cancel_requested and outcome is not None:
            return outcome
        detail = f"\n{outcome.error}" if outcome is not None and outcome.error else ""
        if interrupted == TIMEOUT and not message.cancel_requested:
            timeout = self.control.timeouts.get(message.queue)
            logger.warning(
                "message %s of %s timed out after %gs on attempt %d",
                message.id,
                message.queue,
                timeout or 0,
                message.attempt,
            )
            return Outcome(message, "timeout", error=f"timed out after {timeout:g}s{detail}")
        logger.warning("message %s of %s was cancelled while it ran", message.id, message.queue)
        return Outcome(message, "cancelled", error=f"cancelled while running{detail}")

    async def _consume_async(self, message: Message) -> None:
        """Run one message's ``async def`` handler on the event loop (one consumer task)."""
        with self._lock:
            if message.id not in self._running:  # released before it started
                return
            self._started.add(message.id)
        began = time.monotonic()
        self.observer.handler_started(message)
        try:
            if message.cancel_requested:
                outcome = Outcome(message, "cancelled", error="cancelled before its handler started")
            else:
                _, interrupted, exc = await self.control.aexecute(
                    message, lambda: self.handlers[message.queue](message)
                )
                found = Outcome(message, "ack") if exc is None else self._outcome_of(message, exc)
                outcome = self._after_interrupt(message, found, interrupted)
        except BaseException as exc:  # a bug of ours around the handler, not the handler's
            self.stats.handler_crashes += 1
            logger.critical("event loop crashed around message %s: %s", message.id, type(exc).__name__)
            outcome = Outcome(message, "fail", error=f"worker error around the handler: {type(exc).__name__}")
        self.observer.handler_finished(message, time.monotonic() - began, outcome)
        self._finished(outcome)
        if time.monotonic() >= self._async_connections_due:
            # Django's async ORM runs its queries on one thread of its own: drop that thread's
            # connections that broke or outlived CONN_MAX_AGE, as handler threads do per
            # message (here at most once a second: each check is a hop to that thread).
            self._async_connections_due = time.monotonic() + 1.0
            await sync_to_async(close_old_connections, thread_sensitive=True)()

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
        with self._lock:
            for message in abandoned:
                self._running.pop(message.id, None)
                self._started.discard(message.id)
        self.stats.abandoned += len(abandoned)
        for message in abandoned:
            logger.critical(
                "handler of message %s (%s) ignored its interruption for %gs; abandoning it: its lease "
                "will expire and the message come back; this worker stops (exit status 1)",
                message.id,
                message.queue,
                self.control.interrupt_grace,
            )
            self._on_abandon(message)
        self.exit_code = self.exit_code or 1
        self.stop()

    def _extend_from_handler(self, message: Message, duration: timedelta | float | None) -> None:
        lease_ms = to_ms(duration) if duration is not None else self.lease_ms
        with sql_errors(), connections[self.using].cursor() as cursor:
            cursor.execute(
                sql.query("extend"),
                {"ids": [message.id], "tokens": [str(message.lease_token)], "lease_ms": lease_ms},
            )
            rows = cursor.fetchall()
        extended = {row[0] for row in rows}
        if any(row[1] for row in rows):
            message.cancel_requested = True  # the control thread interrupts it at its heartbeat
        if message.id not in extended:
            raise LeaseLost(
                f"lease on message {message.id} was lost; another worker may hold it", [message.id]
            )

    # -- giving leases back ----------------------------------------------------------------

    def _flush_outcomes(self) -> None:
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
            acks = [o for o in done if o.action == "ack"]
            if acks:
                ids = _array_literal(o.message.id for o in acks)
                tokens = _array_literal(o.message.lease_token for o in acks)
                acked = set(self._scalar("ack", {"ids": ids, "tokens": tokens}) or [])
                self.stats.acked += len(acked)
                missing = [o for o in acks if o.message.id not in acked]
                gone = self._gone([o.message.id for o in missing if o.resent])
                for outcome in acks:
                    if outcome.message.id in acked or outcome.message.id in gone:
                        self.observer.acked(outcome.message)
                for outcome in missing:
                    if outcome.message.id in gone:
                        self.stats.acked += 1  # the ack sent before the connection dropped committed
                    else:
                        self._report_lost(outcome.message)
                recorded.extend(acks)
            for outcome in done:
                if outcome.action != "ack":
                    self._fail(outcome)
                    recorded.append(outcome)
        except _STATEMENT_ERRORS:
            for outcome in done:  # keep what was not recorded: flushed again after reconnecting
                if not any(outcome is r for r in recorded):
                    outcome.resent = True
                    self._outcomes.put(outcome)
            raise
        finally:
            with self._lock:
                for outcome in recorded:
                    self._running.pop(outcome.message.id, None)
                    self._started.discard(outcome.message.id)

    def _gone(self, ids: list[int]) -> set[int]:
        """Of ``ids``, those no longer in the message table."""
        if not ids:
            return set()
        assert self._conn is not None
        found = self._conn.execute("SELECT id FROM lonnymq_message WHERE id = ANY (%s)", [ids]).fetchall()
        return set(ids) - {row[0] for row in found}

    def _fail(self, outcome: Outcome) -> None:
        message = outcome.message
        try:
            result = self._scalar(
                "fail",
                {
                    "id": message.id,
                    "token": str(message.lease_token),
                    "error": outcome.error,
                    "retry_delay_ms": outcome.delay_ms if outcome.action == "retry" else None,
                    "reason": _FAIL_REASONS[outcome.action],
                    "backoff_base_ms": settings.ms("RETRY_BACKOFF_BASE"),
                    "backoff_max_ms": settings.ms("RETRY_BACKOFF_MAX"),
                    "tolerance_ms": settings.ms("WAKE_TOLERANCE"),
                },
            )
        except (LeaseLost, MessageNotFound):
            if outcome.resent:  # recorded by the call in flight when the connection dropped
                logger.info("failure of message %s was recorded before the connection dropped", message.id)
            else:
                self._report_lost(message)
            return
        except Exception as exc:
            if isinstance(exc, _DB_ERRORS) and self._connection_is_lost(exc):
                raise
            logger.error("could not record the failure of message %s: %r", message.id, exc)
            return
        if outcome.action == "timeout":
            self.stats.timed_out += 1
            self.observer.timed_out(message)
        elif outcome.action == "cancelled":
            self.stats.cancelled += 1
            self.observer.cancelled(message)
        if result == "dead":
            self.stats.dead += 1
        else:
            self.stats.retried += 1
        self.observer.failed(outcome, result)

    def _report_lost(self, message: Message) -> None:
        self.stats.lease_lost += 1
        self.observer.lease_lost(message)
        logger.warning(
            "lease on message %s expired before it finished; it may run again (raise --lease?)", message.id
        )

    def _maintain(self) -> None:
        """Heartbeat running leases, the worker's row, and reap expired leases, each on its own clock."""
        if self.housekeeping:
            self.presence.tick()
            self.observer.tick()
        now = time.monotonic()
        if self._next_extend and now >= self._next_extend:
            with self._lock:
                running = list(self._running.values())
            if running:
                self._extend(running)
            self._next_extend = now + self.lease_ms / 3000 if running else 0.0
        if now >= self._next_reap:
            self._next_reap = now + self.reap_interval
            reaped = self._scalar(
                "reap",
                {
                    "limit": 500,
                    "dedup_window_ms": settings.ms("DEDUP_WINDOW"),
                    "tolerance_ms": settings.ms("WAKE_TOLERANCE"),
                },
            )
            if reaped:
                self.stats.reaped += int(reaped)
                logger.info("recovered %d message(s) whose lease expired", reaped)
        if self.housekeeping and not self._stopping.is_set():
            self._ticker.run(self._conn)  # never raises; on its own clock

    def _extend(self, running: list[Message]) -> None:
        """The heartbeat: extend the leases held, and learn which were cancelled meanwhile."""
        rows = self._execute(
            "extend",
            {
                "ids": [m.id for m in running],
                "tokens": [str(m.lease_token) for m in running],
                "lease_ms": self.lease_ms,
            },
        )
        extended = {row[0] for row in rows}
        cancelled = {row[0] for row in rows if row[1]}
        for message in running:
            if message.id not in extended:
                logger.warning("lease on running message %s was lost; it may run twice", message.id)
        if cancelled:
            self.control.cancel([m for m in running if m.id in cancelled])

    # -- shutdown ------------------------------------------------------------------------

    def _abandon_running(self) -> None:
        """A forced exit leaves running handlers behind: exit status 1, and each handler's
        ``on_abandon(message)`` (if it has one) records what it needs to."""
        self.exit_code = self.exit_code or 1
        with self._lock:
            running = list(self._running.values())
        if running:
            logger.warning(
                "exiting at once with %d handler(s) running; their messages will be redelivered after the lease",
                len(running),
            )
        for message in running:
            self._on_abandon(message)

    def _on_abandon(self, message: Message) -> None:
        """Call the handler's ``on_abandon(message)``, if it has one."""
        on_abandon = getattr(self.handlers.get(message.queue), "on_abandon", None)
        if on_abandon is None:
            return
        try:
            on_abandon(message)
        except Exception as exc:
            logger.error("on_abandon of message %s failed: %s", message.id, short_repr(exc))

    def _shutdown(self) -> None:
        """Let running handlers finish (bounded), release what never started, flush acks."""
        deadline = time.monotonic() + self.shutdown_timeout
        with self._lock:
            not_started = [m for i, m in self._running.items() if i not in self._started]
            for message in not_started:
                self._running.pop(message.id, None)
        while self._running and time.monotonic() < deadline and not self._forced.is_set():
            try:
                self._ensure_connected()
                self._flush_outcomes()
                self._supervise()
                if self._running:
                    self._wait(min(0.1, max(deadline - time.monotonic(), 0)))
                    self._maintain()
            except _STATEMENT_ERRORS as exc:
                self._lost_connection(exc)
                if self._stopping.is_set() and time.monotonic() >= deadline:
                    break
        try:
            self._ensure_connected()
            if self._conn is not None:
                self._flush_outcomes()
                if not_started:
                    released = self._scalar(
                        "release",
                        {
                            "ids": [m.id for m in not_started],
                            "tokens": [str(m.lease_token) for m in not_started],
                            "tolerance_ms": settings.ms("WAKE_TOLERANCE"),
                        },
                    )
                    self.stats.released += len(released or [])
                self.presence.stopped()
        except _STATEMENT_ERRORS as exc:
            logger.warning("could not flush on shutdown (%s); leases will expire and be redelivered", exc)
        if self._forced.is_set():
            self._abandon_running()
        elif self._running:
            logger.warning(
                "%d handler(s) still running after %.0fs; their messages will be redelivered after the lease",
                len(self._running),
                self.shutdown_timeout,
            )
        for _ in self._threads:
            self._jobs.put(None)
        if self._event_loop is not None:
            self._event_loop.stop()
        if self._conn is not None:
            self._conn.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
