"""The messages a worker holds a lease on: running, or leased and waiting for a free handler,
or collected for a batch handler's call (:mod:`.batches`).

The control thread adds what it fetched and drops what it recorded, released or abandoned;
a handler thread (or the event loop) marks a message started before running it; housekeeping
and observers read snapshots. Every access goes through this object and its one lock.

Its :meth:`~Held.load` counts handler calls, not messages: a batch dispatched to the handler
threads counts once, messages still being collected not at all, so the worker fetches while
a thread is free whatever the batches hold.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Iterable

from ..message import Message


class Held:
    """The leases of one worker, by message id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: dict[int, Message] = {}
        # The messages not started yet (the local buffer), with when each was leased
        # (monotonic); the others held are running or finished and not recorded yet.
        self._leased_at: dict[int, float] = {}
        # Messages collected for a batch handler's call, with when each was leased.
        self._collecting: dict[int, float] = {}
        # The messages that count in load(): one per call (a batch's first message).
        self._calls: set[int] = set()

    def add(self, messages: Iterable[Message], *, collecting: bool = False) -> None:
        """Leased now: each waits for a thread (a call of its own), or (``collecting``) is
        collected for a batch, which :meth:`dispatch` hands to the threads as one call."""
        now = time.monotonic()
        with self._lock:
            for message in messages:
                self._messages[message.id] = message
                if collecting:
                    self._collecting[message.id] = now
                else:
                    self._leased_at[message.id] = now
                    self._calls.add(message.id)

    def dispatch(self, batch: list[Message]) -> list[Message]:
        """A collected batch goes to the threads as one call (waiting from now); returns its
        messages still held (one released meanwhile is left out)."""
        now = time.monotonic()
        with self._lock:
            kept = [m for m in batch if m.id in self._messages]
            for message in kept:
                self._collecting.pop(message.id, None)
                self._leased_at[message.id] = now
            if kept:
                self._calls.add(kept[0].id)
        return kept

    def start_batch(self, batch: list[Message]) -> list[Message]:
        """Mark a batch's messages started; those released before it could start are left out."""
        with self._lock:
            kept = [m for m in batch if m.id in self._messages]
            for message in kept:
                self._leased_at.pop(message.id, None)
        return kept

    def start(self, message: Message) -> bool:
        """Mark ``message`` started; False when it was released before it could start."""
        with self._lock:
            if message.id not in self._messages:
                return False
            self._leased_at.pop(message.id, None)
            return True

    def drop(self, ids: Iterable[int]) -> None:
        """No longer held: recorded, released or abandoned."""
        with self._lock:
            for message_id in ids:
                self._messages.pop(message_id, None)
                self._leased_at.pop(message_id, None)
                self._collecting.pop(message_id, None)
                self._calls.discard(message_id)

    def take_waiting(self) -> list[Message]:
        """Drop and return the messages whose handler never started, collected ones included
        (to release them)."""
        with self._lock:
            collected = [self._messages.pop(i) for i in self._collecting]
            self._collecting.clear()
        return collected + self.take_stale(math.inf)

    def take_stale(self, leased_before: float) -> list[Message]:
        """Drop and return the messages leased before ``leased_before`` (monotonic) whose
        handler has not started: the buffer gives them back rather than sit on them."""
        with self._lock:
            stale = [self._messages[i] for i, at in self._leased_at.items() if at < leased_before]
            for message in stale:
                del self._messages[message.id]
                del self._leased_at[message.id]
                self._calls.discard(message.id)
        return stale

    def waiting(self) -> int:
        """Leased and not started yet: the local buffer."""
        return len(self._leased_at)  # one read of a dict's size: no lock needed

    def oldest_waiting(self) -> float | None:
        """When the longest-waiting message of the buffer was leased (monotonic), if any."""
        with self._lock:
            return min(self._leased_at.values(), default=None)

    def snapshot(self) -> list[Message]:
        with self._lock:
            return list(self._messages.values())

    def ids(self) -> set[int]:
        with self._lock:
            return set(self._messages)

    def by_queue(self) -> Counter[str]:
        with self._lock:
            return Counter(message.queue for message in self._messages.values())

    def count(self) -> int:
        return len(self._messages)  # one read of a dict's size: no lock needed

    def load(self) -> int:
        """Handler calls held: running, finished and not recorded, or waiting for a thread
        (a batch counts once, a message being collected not at all)."""
        return len(self._calls)  # one read of a set's size: no lock needed

    def collecting(self) -> int:
        return len(self._collecting)
