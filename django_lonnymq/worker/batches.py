"""Batch handlers' messages, collected per channel until a call's batch is full or waited long
enough (``@handler(queue, batch=N, batch_wait=...)``).

The control thread adds what it leased for a batch queue and takes the batches to dispatch:
a channel's batch goes out as soon as it holds N messages, or ``batch_wait`` after its first
message was leased. Batches go out in the order they began, which follows the dequeue's round
robin: a full batch takes every batch begun before it out first, so the channel whose turn
came first is served first, full or not. Every message was
leased by the dequeue, so each counts against its channel's cap and bucket as any other, and
a batch never holds more than the channel's cap lets it lease at once.

What a worker may collect is bounded: at most twice ``N x concurrency`` messages per queue
(:meth:`Collector.room`). When that is reached and a thread is free, the batch begun first
goes out at once rather than at the end of its wait (a thread never idles while collected
work waits): with more channels ready at once than the bound serves with full batches,
batches go out smaller, fairness between channels first.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..message import Message
from ..registry import BatchSpec


@dataclass
class Pending:
    """One channel's batch being collected."""

    queue: str
    messages: list[Message] = field(default_factory=list)
    due_at: float = 0.0  # monotonic: when it goes out even if not full


class Collector:
    """The batches being collected by one worker, per (queue, channel), in the order begun."""

    def __init__(self, specs: dict[str, BatchSpec], concurrency: int):
        self.specs = specs
        self.concurrency = concurrency
        self._pending: dict[tuple[str, str], Pending] = {}
        self._counts: dict[str, int] = dict.fromkeys(specs, 0)

    def is_batched(self, queue: str) -> bool:
        return queue in self.specs

    def ask(self, queue: str, calls: int) -> int:
        """How many messages to lease for ``calls`` free handler calls of a batch queue: a
        full batch each, within the collector's room."""
        return max(min(calls * self.specs[queue].size, self.room(queue)), 0)

    def room(self, queue: str) -> int:
        """Messages the queue's collector may still take (at most twice N x concurrency)."""
        return 2 * self.specs[queue].size * self.concurrency - self._counts[queue]

    def add(self, queue: str, messages: Iterable[Message]) -> list[list[Message]]:
        """Collect leased messages of ``queue``; returns the batches to dispatch now: each one
        they filled, after the batches begun before it."""
        spec = self.specs[queue]
        full: list[list[Message]] = []
        now = time.monotonic()
        for message in messages:
            key = (queue, message.channel)
            pending = self._pending.get(key)
            if pending is None:
                pending = self._pending[key] = Pending(queue, due_at=now + spec.wait)
            pending.messages.append(message)
            self._counts[queue] += 1
            if len(pending.messages) >= spec.size:
                # It goes out with every batch begun before it, first: a batch never passes
                # one begun earlier (a channel whose cap keeps its batch small is not
                # overtaken by channels that fill theirs).
                for earlier in list(self._pending):
                    taken = self._pending.pop(earlier)
                    self._counts[taken.queue] -= len(taken.messages)
                    full.append(taken.messages)
                    if earlier == key:
                        break
        return full

    def due(self, now: float) -> list[list[Message]]:
        """The batches whose wait ended, the oldest first (taken out of the collector)."""
        found = [(key, p) for key, p in self._pending.items() if p.due_at <= now]
        found.sort(key=lambda item: item[1].due_at)
        for key, pending in found:
            del self._pending[key]
            self._counts[pending.queue] -= len(pending.messages)
        return [pending.messages for _, pending in found]

    def take_oldest(self, queue: str) -> list[Message] | None:
        """The queue's batch begun first, taken out before its wait ended (a thread is free
        and the collector is full: waiting longer would only leave the thread idle)."""
        for key, pending in self._pending.items():
            if pending.queue == queue:
                del self._pending[key]
                self._counts[queue] -= len(pending.messages)
                return pending.messages
        return None

    def next_due(self) -> float | None:
        """When the next batch's wait ends (monotonic), None when nothing is collected."""
        return min((p.due_at for p in self._pending.values()), default=None)

    def clear(self) -> None:
        """Forget what is collected (shutdown: the held messages are released there)."""
        self._pending.clear()
        self._counts = dict.fromkeys(self.specs, 0)

    def __len__(self) -> int:
        return sum(self._counts.values())
