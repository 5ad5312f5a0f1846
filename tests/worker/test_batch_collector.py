"""The worker's batch collector (worker/batches.py), without a database: batches of one
channel, never over N; a full batch goes out after every batch begun before it; the collector's
room; the oldest batch taken early; a batch's wait."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from django_lonnymq.message import Message
from django_lonnymq.registry import BatchSpec
from django_lonnymq.worker.batches import Collector

ids = iter(range(1, 10**6))


def msgs(channel: str, n: int, queue: str = "q") -> list[Message]:
    return [Message(next(ids), queue, channel, {}, 1, 5, datetime.now(UTC)) for _ in range(n)]


def channels(batches: list[list[Message]]) -> list[tuple[str, int]]:
    return [(b[0].channel, len(b)) for b in batches if len({m.channel for m in b}) == 1]


def test_a_full_batch_goes_out_after_the_batches_begun_before_it():
    collector = Collector({"q": BatchSpec(3, 60)}, concurrency=1)
    assert collector.add("q", msgs("a", 1) + msgs("b", 2) + msgs("c", 1)) == []
    # b fills: a (begun before it) goes first, c (begun after) stays.
    assert channels(collector.add("q", msgs("b", 1))) == [("a", 1), ("b", 3)]
    assert len(collector) == 1
    # One add that fills a channel twice: two batches, never more than 3.
    assert channels(collector.add("q", msgs("d", 7))) == [("c", 1), ("d", 3), ("d", 3)]
    assert len(collector) == 1


def test_room_ask_and_the_oldest_taken_before_its_wait_ends():
    collector = Collector({"q": BatchSpec(10, 60)}, concurrency=2)
    assert collector.room("q") == 40 and collector.ask("q", 1) == 10 and collector.ask("q", 9) == 40
    assert channels(collector.add("q", msgs("b", 30) + msgs("a", 5) + msgs("c", 4))) == [("b", 10)] * 3
    assert collector.room("q") == 31 and collector.ask("q", 3) == 30 and collector.ask("q", 4) == 31
    oldest = collector.take_oldest("q")
    assert oldest is not None and {m.channel for m in oldest} == {"a"} and len(oldest) == 5
    assert channels([collector.take_oldest("q")]) == [("c", 4)]
    assert collector.take_oldest("q") is None and collector.room("q") == 40


def test_a_batch_goes_out_when_its_wait_ends():
    collector = Collector({"q": BatchSpec(50, 0.05)}, concurrency=1)
    collector.add("q", msgs("a", 2))
    due_at = collector.next_due()
    assert due_at is not None and collector.due(time.monotonic()) == []
    assert channels(collector.due(due_at)) == [("a", 2)]
    assert collector.next_due() is None and len(collector) == 0


def test_a_workers_beat_counts_handler_calls_not_collected_messages():
    """The workers page says "full" by in_flight / threads: a batch of 50 is one call, and the
    messages a batch handler is still collecting hold no thread."""
    from django_lonnymq.worker.held import Held
    from django_lonnymq.worker.housekeeping import Presence

    held = Held()
    presence = Presence(
        None,  # type: ignore[arg-type]  # _figures reads no database
        name="w", queues=["q"], concurrency=4, held=held, stats=type("S", (), {"acked": 0, "retried": 0, "dead": 0})(),
        renamed=lambda name: None,
    )  # fmt: skip
    held.add(msgs("a", 1))
    batch = msgs("b", 50)
    held.add(batch, collecting=True)
    held.add(msgs("c", 30), collecting=True)
    assert held.count() == 81
    assert presence._figures()["in_flight"] == 1
    held.dispatch(batch)
    assert presence._figures()["in_flight"] == 2  # the single message and one batch: 2 of 4 threads
