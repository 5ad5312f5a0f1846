"""The worker's observer interface, against a real drain: each event once per message run,
in order, and an observer that raises is logged, never fatal. Also the Held registry the
worker's parts share."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from datetime import UTC, datetime

import pytest

from django_lonnymq import Discard, Item, Retry, enqueue_many, handler
from django_lonnymq.message import Message
from django_lonnymq.registry import unregister
from django_lonnymq.worker import Observer, Worker
from django_lonnymq.worker.held import Held
from django_lonnymq.worker.observer import EVENTS

QUEUE = "t_observed"


class Recorder(Observer):
    """Every event it receives, as (event, message id or None)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int | None]] = []
        self.lock = threading.Lock()

    def _note(self, event: str, message_id: int | None) -> None:
        with self.lock:
            self.events.append((event, message_id))

    def fetched(self, messages):
        for message in messages:
            self._note("fetched", message.id)

    def handler_started(self, message):
        self._note("handler_started", message.id)

    def handler_finished(self, message, seconds, outcome):
        assert seconds >= 0 and outcome.message is message
        self._note(f"handler_finished:{outcome.action}", message.id)

    def acked(self, message):
        self._note("acked", message.id)

    def retried(self, outcome):
        self._note("retried", outcome.message.id)

    def dead(self, outcome):
        self._note("dead", outcome.message.id)

    def timed_out(self, message):
        self._note("timed_out", message.id)

    def cancelled(self, message):
        self._note("cancelled", message.id)

    def lease_lost(self, message):
        self._note("lease_lost", message.id)

    def stopped(self):
        self._note("stopped", None)

    def of(self, message_id: int) -> list[str]:
        return [event for event, about in self.events if about == message_id]


def _handle(message: Message) -> None:
    what = message.payload["do"]
    if what == "retry_once" and message.attempt == 1:
        raise Retry(delay=0)
    if what == "discard":
        raise Discard("not wanted")
    if what == "fail":
        raise RuntimeError("it fails")


@pytest.fixture
def observed_queue():
    handler(QUEUE)(_handle)
    yield QUEUE
    unregister(QUEUE)


@pytest.mark.django_db(transaction=True)
def test_an_observer_receives_each_event_once_per_run_in_order(observed_queue):
    ack, retry, discard, fail = enqueue_many(
        observed_queue,
        [
            Item({"do": "ack"}),
            Item({"do": "retry_once"}),
            Item({"do": "discard"}),
            Item({"do": "fail"}, max_attempts=1),
        ],
    )
    worker = Worker([observed_queue], concurrency=2, burst=True, housekeeping=False)
    recorder = Recorder()
    worker.observers.add(recorder)
    stats = worker.run()

    run = ["fetched", "handler_started"]
    assert recorder.of(ack) == [*run, "handler_finished:ack", "acked"]
    assert recorder.of(retry) == [
        *run,
        "handler_finished:retry",
        "retried",
        *run,
        "handler_finished:ack",
        "acked",
    ]
    assert recorder.of(discard) == [*run, "handler_finished:discard", "dead"]
    assert recorder.of(fail) == [*run, "handler_finished:fail", "dead"]
    assert recorder.events[-1] == ("stopped", None)
    assert Counter(event for event, _ in recorder.events)["stopped"] == 1
    assert (stats.fetched, stats.acked, stats.retried, stats.dead) == (5, 2, 1, 2), stats.summary()


@pytest.mark.django_db(transaction=True)
def test_an_observer_that_raises_is_logged_and_the_messages_still_finish(observed_queue, caplog):
    class Broken(Observer):
        def handler_started(self, message):
            raise RuntimeError("observer bug at the start")

        def acked(self, message):
            raise RuntimeError("observer bug at the ack")

    ids = enqueue_many(observed_queue, [Item({"do": "ack"}) for _ in range(3)])
    worker = Worker([observed_queue], burst=True, housekeeping=False)
    worker.observers.add(Broken())
    recorder = Recorder()
    worker.observers.add(recorder)  # after the broken one: still told
    with caplog.at_level(logging.ERROR, logger="django_lonnymq.worker"):
        stats = worker.run()

    assert stats.acked == 3 and stats.dead == 0, stats.summary()
    assert sorted(about for event, about in recorder.events if event == "acked") == sorted(ids)
    failures = [r.getMessage() for r in caplog.records if "observer" in r.getMessage()]
    assert len(failures) == 6 and all("Broken." in text for text in failures), failures


def test_an_observer_overrides_only_what_it_needs():
    assert set(EVENTS) == {name for name in vars(Observer) if not name.startswith("_")}


def _message(message_id: int) -> Message:
    return Message(message_id, "q", "c", {}, 1, 1, datetime.now(UTC))


def test_held_messages_start_once_and_a_released_one_never_starts():
    held = Held()
    first, second, third = _message(1), _message(2), _message(3)
    held.add([first, second, third])
    assert held.start(first) is True
    assert held.count() == 3 and held.by_queue() == {"q": 3}
    # On shutdown, what never started is taken (to release it); a handler then skips it.
    assert [m.id for m in held.take_waiting()] == [2, 3]
    assert held.start(second) is False
    assert held.ids() == {1}
    held.drop([1])
    assert held.count() == 0 and held.snapshot() == []
