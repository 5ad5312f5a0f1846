"""Signal receivers off the control thread: the events the control thread observes (an ack,
a retry, a dead letter) are handed to one thread of their own, which sends the signals in
order. A slow receiver then delays other receivers, never a lease extension, an ack or a
fetch; and that thread recycles its Django connections after each event as Django does after
a request, so one lost connection does not break every later receiver that uses the database.

``message_started`` stays on the thread that runs the handler (it runs right before it).
"""

from __future__ import annotations

import logging
import queue as queue_mod
import threading
import time
from collections.abc import Callable

from django.db import close_old_connections, connections

from ..message import Message
from .observer import Observer, SignalObserver
from .outcomes import Outcome

logger = logging.getLogger("django_lonnymq.worker")

# A backlog of events past this is logged (at most once a minute): receivers slower than the
# queue's throughput. Nothing is dropped; the backlog is only memory.
BACKLOG_WARNING = 10_000


class ReceiverThread(Observer):
    """Sends the lifecycle signals of the control thread's events on a thread of its own."""

    def __init__(self, signals: SignalObserver | None = None, *, drain_timeout: float = 30.0) -> None:
        self.signals = signals or SignalObserver()
        self.drain_timeout = drain_timeout
        self._events: queue_mod.SimpleQueue[Callable[[], None] | None] = queue_mod.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._warned_at = 0.0

    # -- on the handler's thread ----------------------------------------------------------
    def handler_started(self, message: Message) -> None:
        self.signals.handler_started(message)

    # -- from the control thread: queued ---------------------------------------------------
    def acked(self, message: Message) -> None:
        self._put(lambda: self.signals.acked(message))

    def retried(self, outcome: Outcome) -> None:
        self._put(lambda: self.signals.retried(outcome))

    def snoozed(self, message: Message) -> None:
        self._put(lambda: self.signals.snoozed(message))

    def dead(self, outcome: Outcome) -> None:
        self._put(lambda: self.signals.dead(outcome))

    def lease_lost(self, message: Message) -> None:
        self._put(lambda: self.signals.lease_lost(message))

    def stopped(self) -> None:
        """Let the receivers catch up (at most ``drain_timeout`` seconds), then end the thread."""
        thread = self._thread
        if thread is None:
            return
        self._events.put(None)
        thread.join(self.drain_timeout)
        if thread.is_alive():
            logger.warning(
                "signal receivers still running after %.0fs at shutdown; %d event(s) not sent",
                self.drain_timeout,
                self._events.qsize(),
            )

    def _put(self, send: Callable[[], None]) -> None:
        self._start()
        self._events.put(send)
        backlog = self._events.qsize()
        if backlog > BACKLOG_WARNING and time.monotonic() - self._warned_at > 60:
            self._warned_at = time.monotonic()
            logger.warning(
                "signal receivers are %d event(s) behind: a message_finished/message_dead receiver is slower "
                "than the queue (they run on their own thread, so leases and acks go on)",
                backlog,
            )

    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="lonnymq-receivers", daemon=True)
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        try:
            while True:
                send = self._events.get()
                if send is None:
                    return
                try:
                    send()
                except BaseException as exc:  # noqa: BLE001 - nothing a receiver does stops this thread
                    logger.error("signal receiver failed: %r", exc)
                finally:
                    _recycle_connections()
        finally:
            connections.close_all()


def _recycle_connections() -> None:
    """Django's end-of-request step for this thread: close connections that broke or
    outlived ``CONN_MAX_AGE`` (the next query opens a fresh one)."""
    try:
        close_old_connections()
    except Exception as exc:  # noqa: BLE001 - a connection that cannot even close is dropped
        logger.debug("closing a receiver connection failed: %r", exc)
