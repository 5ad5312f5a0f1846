"""The messages a worker holds a lease on: running, or leased and waiting for a free handler.

The control thread adds what it fetched and drops what it recorded, released or abandoned;
a handler thread (or the event loop) marks a message started before running it; housekeeping
and observers read snapshots. Every access goes through this object and its one lock.
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

    def add(self, messages: Iterable[Message]) -> None:
        now = time.monotonic()
        with self._lock:
            for message in messages:
                self._messages[message.id] = message
                self._leased_at[message.id] = now

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

    def take_waiting(self) -> list[Message]:
        """Drop and return the messages whose handler never started (to release them)."""
        return self.take_stale(math.inf)

    def take_stale(self, leased_before: float) -> list[Message]:
        """Drop and return the messages leased before ``leased_before`` (monotonic) whose
        handler has not started: the buffer gives them back rather than sit on them."""
        with self._lock:
            stale = [self._messages[i] for i, at in self._leased_at.items() if at < leased_before]
            for message in stale:
                del self._messages[message.id]
                del self._leased_at[message.id]
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
