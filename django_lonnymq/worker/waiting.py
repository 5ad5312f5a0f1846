"""The control thread's sleep: on the connection's socket (a notification) and a self-pipe
(a finished handler, a stop request) at once, so either wakes it within milliseconds.

A finished handler writes to the pipe only while the control thread sleeps (:attr:`sleeping`):
a write per message cost more than a no-op handler.
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable
from typing import Any

# The channel the cancel statement notifies when a message someone cancelled is running.
CANCEL_CHANNEL = "lonnymq_cancel"


class Waiter:
    """One worker's sleep and its wake-up pipe."""

    def __init__(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        # Set while the control thread sleeps in wait(): only then does nudge() write.
        self.sleeping = False
        # A cancel was notified since take_cancels(): the heartbeat reads which.
        self._cancels = False

    def take_cancels(self) -> bool:
        """Was a cancel notified since the last call?"""
        cancels, self._cancels = self._cancels, False
        return cancels

    def wake(self) -> None:
        """Wake the control thread (signal-safe)."""
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def nudge(self) -> None:
        """A handler finished: wake the control thread if it sleeps, once per sleep."""
        if self.sleeping:
            self.sleeping = False
            self.wake()

    def wait(self, timeout: float, conn: Any, ready: Callable[[], bool]) -> None:
        """Sleep until a notification on ``conn``, a wake-up, or ``timeout``; at once when
        ``ready()`` (finished handlers wait to be recorded)."""
        # Raised before ready() looks: a handler that finishes after this look sees the flag
        # and wakes us; one that finished before it is seen by ready().
        self.sleeping = True
        try:
            self._sleep(timeout, conn, ready)
        finally:
            self.sleeping = False

    def _sleep(self, timeout: float, conn: Any, ready: Callable[[], bool]) -> None:
        if ready() or timeout <= 0:
            return
        usable = conn is not None and not conn.closed
        # A notification that arrived while another query ran (ack, next_due, ...) was read
        # off the socket by psycopg and sits in its backlog: select() would not see it and
        # the worker would sleep a whole poll interval with a message ready.
        if usable and self._drain_notifies(conn):
            return
        fds: list[int] = [self._wake_r]
        if usable:
            fds.append(conn.fileno())
        readable, _, _ = select.select(fds, [], [], timeout)
        if self._wake_r in readable:
            try:
                while os.read(self._wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
        if len(fds) > 1 and fds[1] in readable:
            self._drain_notifies(conn)

    def _drain_notifies(self, conn: Any) -> bool:
        """Consume notifications psycopg already holds (noting a cancel); True when there were any."""
        got = False
        for notify in conn.notifies(timeout=0):
            got = True
            if notify.channel == CANCEL_CHANNEL:
                self._cancels = True
        return got

    def close(self) -> None:
        os.close(self._wake_r)
        os.close(self._wake_w)
