"""lonnymq_check_v1 (api.check) sees broken scheduler state, so its [] elsewhere means something."""

from __future__ import annotations

import pytest
from django.db import connection

from django_lonnymq import api, enqueue

from .helpers import configure, db_now_ms, dequeue

pytestmark = pytest.mark.django_db


def _execute(statement: str, params=None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def test_check_reports_an_in_flight_counter_that_disagrees_with_the_leases():
    configure("chk", "c", max_concurrency=2)
    enqueue("chk", "x", channel="c")
    dequeue("chk")
    assert api.check() == []
    _execute("UPDATE lonnymq_channel SET in_flight = 0 WHERE queue = 'chk'")
    [problem] = api.check()
    assert (problem.queue, problem.channel, problem.problem) == ("chk", "c", "in_flight_mismatch")
    assert "in_flight=0" in problem.detail and "leases=1" in problem.detail


def test_check_reports_a_stranded_channel():
    message_id = enqueue("chk", "x", channel="s")
    _execute("UPDATE lonnymq_message SET dequeue_at = %s WHERE id = %s", [db_now_ms() - 10_000, message_id])
    _execute("UPDATE lonnymq_channel SET next_dequeue_at = NULL WHERE queue = 'chk'")
    _execute("DELETE FROM lonnymq_wake WHERE queue = 'chk'")  # the enqueue's wake-up mark
    [problem] = api.check()
    assert (problem.channel, problem.problem) == ("s", "stranded")
    assert dequeue("chk") == []  # really stranded: dequeue cannot see it


def test_a_pending_wake_up_mark_is_not_stranded_and_the_next_dequeue_applies_it():
    """The enqueue into a new (parked) channel leaves a mark instead of locking the row."""
    message_id = enqueue("chk", "x", channel="m")
    _execute("UPDATE lonnymq_message SET dequeue_at = %s WHERE id = %s", [db_now_ms() - 10_000, message_id])
    with connection.cursor() as cursor:
        cursor.execute("SELECT next_dequeue_at FROM lonnymq_channel WHERE queue = 'chk' AND name = 'm'")
        assert cursor.fetchone() == (None,)
        cursor.execute("SELECT count(*) FROM lonnymq_wake WHERE queue = 'chk'")
        assert cursor.fetchone() == (1,)
    assert api.check() == []
    assert [row["id"] for row in dequeue("chk")] == [message_id]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM lonnymq_wake WHERE queue = 'chk'")
        assert cursor.fetchone() == (0,)


def test_a_channel_whose_turn_has_come_is_not_stranded_however_old_its_head():
    """A producer that stayed open for a while commits a message dated at its start; the
    channel's turn is now, so the message goes at the next dequeue: not stranded."""
    message_id = enqueue("chk", "x", channel="o")
    dequeue("chk", batch=1)  # applies the mark; the channel is drained and parked
    old = enqueue("chk", "y", channel="o")
    _execute("UPDATE lonnymq_message SET dequeue_at = %s WHERE id = %s", [db_now_ms() - 10_000, old])
    _execute("DELETE FROM lonnymq_wake WHERE queue = 'chk'")
    _execute("UPDATE lonnymq_channel SET next_dequeue_at = %s WHERE queue = 'chk'", [db_now_ms()])
    assert api.check() == []
    assert [row["id"] for row in dequeue("chk")] == [old]
    assert message_id != old


def test_check_ignores_paused_channels_and_future_messages():
    enqueue("chk", "later", channel="f", delay=3600)
    api.configure_channel("chk", "p", paused=True)
    enqueue("chk", "x", channel="p")
    assert api.check(grace=0) == []


def test_one_transaction_leaves_one_mark_per_channel_at_its_earliest_time():
    """Many enqueues into a parked channel in one transaction: one mark, lowered (never
    raised) by later messages, so a long transaction does not pile up row versions."""
    from django.db import transaction

    with transaction.atomic():
        later = enqueue("chk", "later", channel="t", delay=60)
        for _ in range(20):
            enqueue("chk", "later too", channel="t", delay=120)
        now_id = enqueue("chk", "now", channel="t")
        enqueue("chk", "after", channel="t", delay=30)
        with connection.cursor() as cursor:
            cursor.execute("SELECT m.dequeue_at FROM lonnymq_message m WHERE m.id = %s", [now_id])
            (due,) = cursor.fetchone()
            cursor.execute("SELECT dequeue_at FROM lonnymq_wake WHERE queue = 'chk'")
            assert cursor.fetchall() == [(due,)]
    assert [row["id"] for row in dequeue("chk", batch=5)] == [now_id]
    assert later != now_id
