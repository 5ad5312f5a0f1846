"""Snooze: a handler puts its message back for a delay without spending an attempt, its
concurrency slots given back meanwhile; past LONNYMQ_MAX_SNOOZES a snooze is a failed
attempt. The SQL function directly, then a real in-process worker, eager mode and a Task."""

from __future__ import annotations

import math
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction

from django_lonnymq import Snooze, api, enqueue, handler
from django_lonnymq.exceptions import InvalidArgument, LeaseLost
from django_lonnymq.message import Message
from django_lonnymq.models import DeadMessage
from django_lonnymq.models import Message as MessageRow
from django_lonnymq.registry import unregister
from django_lonnymq.signals import message_finished
from django_lonnymq.testing import drain, eager
from tests.harness.helpers import channel_row, db_now_ms, dequeue, message_row, named

pytestmark = pytest.mark.django_db

QUEUE = "t_snooze"


def _snooze(row, *, delay_ms=0, max_snoozes=100, token=None):
    return named(
        "snooze",
        id=row["id"],
        token=token or row["lease_token"],
        delay_ms=delay_ms,
        max_snoozes=max_snoozes,
        backoff_base_ms=0,
        backoff_max_ms=0,
        tolerance_ms=50,
    )


def _drain_until_gone(message_id: int, tries: int = 500) -> None:
    for _ in range(tries):
        drain(QUEUE)
        if not MessageRow.objects.filter(id=message_id).exists():
            return
        time.sleep(0.005)
    raise AssertionError(f"message {message_id} still waits: {message_row(message_id)}")


@pytest.fixture
def handled():
    """Registers a handler for QUEUE for the test; unregistered after."""
    yield lambda fn: handler(QUEUE)(fn)
    unregister(QUEUE)


# -- the SQL function ---------------------------------------------------------------------


def test_a_snooze_gives_the_slot_and_the_attempt_back_and_waits_for_its_delay():
    api.configure_channel(QUEUE, "c", max_concurrency=1)
    msg_id = enqueue(QUEUE, {"n": 1}, channel="c")
    [row] = dequeue(QUEUE)
    assert channel_row(QUEUE, "c")["in_flight"] == 1
    before = db_now_ms()
    assert _snooze(row, delay_ms=60_000) == "snoozed"
    after = message_row(msg_id)
    assert (after["attempts"], after["snoozes"], after["lease_token"], after["slot_taken"]) == (
        0,
        1,
        None,
        False,
    )
    assert after["dequeue_at"] >= before + 60_000
    assert channel_row(QUEUE, "c")["in_flight"] == 0
    assert dequeue(QUEUE) == []  # not due before its delay


def test_a_snooze_with_a_stale_token_is_refused_and_writes_nothing():
    msg_id = enqueue(QUEUE, {"n": 1})
    [row] = dequeue(QUEUE)
    with pytest.raises(LeaseLost), transaction.atomic():
        _snooze(row, token="00000000-0000-0000-0000-000000000000")
    assert message_row(msg_id)["lease_token"] == row["lease_token"]
    assert message_row(msg_id)["snoozes"] == 0


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("delay", {"delay_ms": -1}),
        ("delay", {"delay_ms": 3155760000001}),
        ("max_snoozes", {"max_snoozes": -1}),
    ],
)
def test_a_snooze_with_bad_input_is_refused_and_writes_nothing(field, kwargs):
    msg_id = enqueue(QUEUE, {"n": 1})
    [row] = dequeue(QUEUE)
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        _snooze(row, **kwargs)
    assert caught.value.field == field
    now = message_row(msg_id)
    assert (now["lease_token"], now["snoozes"], now["attempts"]) == (row["lease_token"], 0, 1)


def test_a_snooze_past_the_bound_is_a_failed_attempt():
    msg_id = enqueue(QUEUE, {"n": 1}, max_attempts=2)
    [row] = dequeue(QUEUE)
    assert _snooze(row, max_snoozes=1) == "snoozed"
    [row] = dequeue(QUEUE)
    assert _snooze(row, max_snoozes=1) == "retry"
    assert (message_row(msg_id)["attempts"], message_row(msg_id)["snoozes"]) == (1, 1)
    assert message_row(msg_id)["last_error"] == "snoozed more than 1 times"
    named("run_now", ids=[msg_id], tolerance_ms=50)
    [row] = dequeue(QUEUE)
    assert _snooze(row, max_snoozes=1) == "dead"
    dead = DeadMessage.objects.get(id=msg_id)
    assert (dead.reason, dead.attempts, dead.snoozes) == ("failed", 2, 1)


# -- Snooze itself --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "delay", [-1, -0.5, math.nan, math.inf, "10", None, True, 10**12, timedelta(days=-1)]
)
def test_a_bad_snooze_delay_is_refused_where_it_is_raised(delay):
    with pytest.raises(InvalidArgument) as caught:
        Snooze(delay)
    assert caught.value.field == "delay"
    assert caught.value.value == delay or delay != delay


def test_a_snooze_delay_is_a_timedelta_or_seconds():
    assert Snooze(1.5).delay == timedelta(seconds=1.5)
    assert Snooze(timedelta(minutes=10)).delay == timedelta(minutes=10)


# -- a real worker --------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_snoozing_twenty_times_spends_no_attempt(handled):
    seen: list[tuple[int, int]] = []
    finished: list[str] = []

    def heard(sender, message, outcome, **kwargs):
        finished.append(outcome)

    def snoozer(message: Message) -> None:
        seen.append((message.attempt, message_row(message.id)["snoozes"]))
        connection.close()  # this handler thread's own connection
        if len(seen) <= 20:
            raise Snooze(0.01)

    handled(snoozer)
    message_finished.connect(heard)
    try:
        msg_id = enqueue(QUEUE, {"n": 1}, max_attempts=2)
        _drain_until_gone(msg_id)
    finally:
        message_finished.disconnect(heard)
    assert seen == [(1, n) for n in range(21)]
    assert not DeadMessage.objects.filter(id=msg_id).exists()
    assert finished == ["snoozed"] * 20 + ["acked"]


@pytest.mark.django_db(transaction=True)
def test_snoozing_past_the_bound_fails_then_dead_letters(handled, settings):
    settings.LONNYMQ_MAX_SNOOZES = 3
    settings.LONNYMQ_RETRY_BACKOFF_BASE = timedelta(milliseconds=1)
    runs: list[int] = []

    def snoozer(message: Message) -> None:
        runs.append(message.attempt)
        raise Snooze(0)

    handled(snoozer)
    msg_id = enqueue(QUEUE, {"n": 1}, max_attempts=2)
    _drain_until_gone(msg_id)
    # three snoozes on attempt 1, the fourth fails it; attempt 2's snooze fails it again: dead
    assert runs == [1, 1, 1, 1, 2]
    dead = DeadMessage.objects.get(id=msg_id)
    assert (dead.reason, dead.attempts, dead.snoozes) == ("failed", 2, 3)
    assert dead.last_error == "snoozed more than 3 times"


@pytest.mark.django_db(transaction=True)
def test_a_snoozed_message_gives_its_channel_slot_to_the_next(handled):
    api.configure_channel(QUEUE, "one", max_concurrency=1)
    order: list[str] = []
    lock = threading.Lock()

    def run(message: Message) -> None:
        with lock:
            order.append(message.payload["name"])
        if message.payload["name"] == "a" and order.count("a") == 1:
            raise Snooze(0.2)

    handled(run)
    first = enqueue(QUEUE, {"name": "a"}, channel="one")
    enqueue(QUEUE, {"name": "b"}, channel="one")
    _drain_until_gone(first)
    assert order == ["a", "b", "a"]


@pytest.mark.django_db(transaction=True)
def test_an_async_handler_snoozes(handled):
    runs: list[int] = []

    async def snoozer(message: Message) -> None:
        runs.append(message.attempt)
        if len(runs) == 1:
            raise Snooze(0.01)

    handled(snoozer)
    msg_id = enqueue(QUEUE, {"n": 1}, max_attempts=1)
    _drain_until_gone(msg_id)
    assert runs == [1, 1]
    assert not DeadMessage.objects.filter(id=msg_id).exists()


@pytest.mark.django_db
def test_eager_mode_runs_a_snooze_again_at_once_and_bounds_it(handled, settings):
    settings.LONNYMQ_MAX_SNOOZES = 2
    runs: list[str] = []

    def snoozer(message: Message) -> None:
        runs.append(message.payload["do"])
        if message.payload["do"] == "forever" or runs.count("once") == 1:
            raise Snooze(60)

    handled(snoozer)
    with eager():
        once = enqueue(QUEUE, {"do": "once"})
        forever = enqueue(QUEUE, {"do": "forever"}, max_attempts=1)
    assert runs == ["once", "once", "forever", "forever", "forever"]
    assert not MessageRow.objects.filter(id__in=[once, forever]).exists()
    assert DeadMessage.objects.get(id=forever).last_error == "snoozed more than 2 times"
