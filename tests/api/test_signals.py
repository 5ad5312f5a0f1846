"""The lifecycle signals (django_lonnymq.signals) from a real in-process worker and from eager
mode: each fires once per message run with the outcome the database recorded, and a receiver
that raises is logged and changes nothing."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import pytest

from django_lonnymq import Discard, Item, Retry, enqueue_many, handler
from django_lonnymq.message import Message
from django_lonnymq.models import DeadMessage
from django_lonnymq.models import Message as MessageRow
from django_lonnymq.registry import unregister
from django_lonnymq.signals import message_dead, message_finished, message_started
from django_lonnymq.testing import drain, eager

QUEUE = "t_signals"


def _handle(message: Message) -> None:
    what = message.payload["do"]
    if what == "retry_once" and message.attempt == 1:
        raise Retry(delay=0)
    if what == "discard":
        raise Discard("not wanted")
    if what == "fail":
        raise RuntimeError("it fails")


class Heard:
    """What the three signals told, as (signal, message id, detail)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, int, str | None]] = []

    def started(self, sender, message, **kwargs):
        assert sender is Message
        with self.lock:
            self.events.append(("started", message.id, None))

    def finished(self, sender, message, outcome, error, **kwargs):
        assert sender is Message
        with self.lock:
            self.events.append(("finished", message.id, outcome))

    def dead(self, sender, message, reason, error, **kwargs):
        assert error
        with self.lock:
            self.events.append(("dead", message.id, reason))

    def of(self, message_id: int) -> list[tuple[str, str | None]]:
        return [(signal, detail) for signal, about, detail in self.events if about == message_id]


@pytest.fixture
def heard() -> Iterator[Heard]:
    handler(QUEUE)(_handle)
    got = Heard()
    message_started.connect(got.started)
    message_finished.connect(got.finished)
    message_dead.connect(got.dead)
    yield got
    message_started.disconnect(got.started)
    message_finished.disconnect(got.finished)
    message_dead.disconnect(got.dead)
    unregister(QUEUE)


def _four() -> list[int]:
    return enqueue_many(
        QUEUE,
        [
            Item({"do": "ack"}),
            Item({"do": "retry_once"}),
            Item({"do": "discard"}),
            Item({"do": "fail"}, max_attempts=1),
        ],
    )


def _assert_each_once(heard: Heard, ids: list[int]) -> None:
    ack, retry, discard, fail = ids
    assert heard.of(ack) == [("started", None), ("finished", "acked")]
    assert heard.of(retry) == [
        ("started", None),
        ("finished", "retried"),
        ("started", None),
        ("finished", "acked"),
    ]
    assert heard.of(discard) == [("started", None), ("dead", "discarded"), ("finished", "dead")]
    assert heard.of(fail) == [("started", None), ("dead", "failed"), ("finished", "dead")]


@pytest.mark.django_db(transaction=True)
def test_a_worker_sends_each_signal_once_per_run_with_its_outcome(heard):
    ids = _four()
    stats = drain(QUEUE, concurrency=2)
    assert (stats.acked, stats.retried, stats.dead) == (2, 1, 2), stats.summary()
    _assert_each_once(heard, ids)


@pytest.mark.django_db
def test_eager_mode_sends_the_same_signals(heard):
    with eager():
        ids = _four()
    _assert_each_once(heard, ids)
    assert DeadMessage.objects.filter(id__in=ids).count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_receiver_that_raises_is_logged_and_changes_no_outcome(heard, caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    message_started.connect(broken)
    message_finished.connect(broken)
    try:
        ids = enqueue_many(QUEUE, [Item({"do": "ack"}) for _ in range(3)])
        with caplog.at_level(logging.ERROR, logger="django_lonnymq.signals"):
            stats = drain(QUEUE)
    finally:
        message_started.disconnect(broken)
        message_finished.disconnect(broken)

    assert stats.acked == 3 and stats.dead == 0 and stats.retried == 0, stats.summary()
    assert not MessageRow.objects.filter(id__in=ids).exists()
    assert not DeadMessage.objects.filter(id__in=ids).exists()
    for message_id in ids:  # the other receivers still heard every event
        assert heard.of(message_id) == [("started", None), ("finished", "acked")]
    failures = [r for r in caplog.records if r.name == "django_lonnymq.signals"]
    assert len(failures) == 6, [r.getMessage() for r in failures]
    assert all("receiver bug" in r.getMessage() for r in failures)
    assert sum("of message_started failed on message" in r.getMessage() for r in failures) == 3
    assert sum("of message_finished failed on message" in r.getMessage() for r in failures) == 3


@pytest.mark.django_db
def test_a_receiver_that_raises_in_eager_mode_changes_no_outcome(heard, caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    message_finished.connect(broken)
    try:
        with caplog.at_level(logging.ERROR, logger="django_lonnymq.signals"), eager():
            (ack,) = enqueue_many(QUEUE, [Item({"do": "ack"})])
    finally:
        message_finished.disconnect(broken)
    assert not MessageRow.objects.filter(id=ack).exists()
    assert heard.of(ack) == [("started", None), ("finished", "acked")]
    ours = [r.getMessage() for r in caplog.records if r.name == "django_lonnymq.signals"]
    assert len(ours) == 1 and f"failed on message {ack} of {QUEUE}" in ours[0], ours


# What a receiver may raise that is not an Exception: each is logged like any other error.
BASE_EXCEPTIONS = [asyncio.CancelledError, SystemExit, KeyboardInterrupt]


async def _handle_async(message: Message) -> None:
    _handle(message)


@pytest.fixture
def async_queue() -> Iterator[str]:
    handler(ASYNC_QUEUE)(_handle_async)
    yield ASYNC_QUEUE
    unregister(ASYNC_QUEUE)


ASYNC_QUEUE = "t_signals_async"


@pytest.mark.parametrize("raised", BASE_EXCEPTIONS)
@pytest.mark.django_db(transaction=True)
def test_a_receiver_raising_a_base_exception_changes_nothing_in_a_worker(heard, async_queue, caplog, raised):
    def broken(sender, **kwargs):
        raise raised("receiver bug")

    for signal in (message_started, message_finished, message_dead):
        signal.connect(broken)
    try:
        ids = _four() + enqueue_many(async_queue, [Item({"do": "ack"}), Item({"do": "discard"})])
        with caplog.at_level(logging.ERROR, logger="django_lonnymq.signals"):
            stats = drain(QUEUE, async_queue, concurrency=2)
    finally:
        for signal in (message_started, message_finished, message_dead):
            signal.disconnect(broken)

    assert (stats.acked, stats.retried, stats.dead) == (3, 1, 3), stats.summary()
    assert stats.handler_crashes == 0
    _assert_each_once(heard, ids[:4])  # the receivers after the broken one heard everything
    assert heard.of(ids[4]) == [("started", None), ("finished", "acked")]
    assert heard.of(ids[5]) == [("started", None), ("dead", "discarded"), ("finished", "dead")]
    failures = [r for r in caplog.records if r.name == "django_lonnymq.signals"]
    # 7 runs started and finished, 3 dead: 17 events, each logged once with its traceback.
    assert len(failures) == 17, [r.getMessage() for r in failures]
    assert all(r.exc_info and r.exc_info[0] is raised for r in failures)


@pytest.mark.parametrize("raised", BASE_EXCEPTIONS)
@pytest.mark.django_db
def test_a_receiver_raising_a_base_exception_changes_nothing_in_eager_mode(heard, caplog, raised):
    def broken(sender, **kwargs):
        raise raised("receiver bug")

    for signal in (message_started, message_finished, message_dead):
        signal.connect(broken)
    try:
        with caplog.at_level(logging.ERROR, logger="django_lonnymq.signals"), eager():
            ids = _four()
    finally:
        for signal in (message_started, message_finished, message_dead):
            signal.disconnect(broken)
    _assert_each_once(heard, ids)
    assert DeadMessage.objects.filter(id__in=ids).count() == 2
    assert not MessageRow.objects.filter(id__in=ids).exists()
    assert len([r for r in caplog.records if r.name == "django_lonnymq.signals"]) == 12


@pytest.mark.django_db(transaction=True)
def test_an_async_receiver_raising_cancelled_error_changes_nothing(heard, caplog):
    async def broken(sender, **kwargs):
        raise asyncio.CancelledError("receiver bug")

    message_finished.connect(broken)
    try:
        ids = enqueue_many(QUEUE, [Item({"do": "ack"}) for _ in range(2)])
        with caplog.at_level(logging.ERROR, logger="django_lonnymq.signals"):
            stats = drain(QUEUE)
    finally:
        message_finished.disconnect(broken)
    assert stats.acked == 2 and stats.dead == 0, stats.summary()
    assert [heard.of(i) for i in ids] == [[("started", None), ("finished", "acked")]] * 2
    assert len([r for r in caplog.records if r.name == "django_lonnymq.signals"]) == 2
