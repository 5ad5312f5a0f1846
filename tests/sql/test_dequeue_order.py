"""Release order: FIFO within a channel, "not before" scheduling, priority."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from django_lonnymq import Item, enqueue, enqueue_many
from django_lonnymq.exceptions import PriorityWithSchedule
from tests.harness.helpers import (
    LEASE_MS,
    assert_healthy,
    counts,
    db_now_ms,
    dequeue,
    enqueue_sql,
    ids,
    message_row,
    named,
)

pytestmark = pytest.mark.django_db


def wait_until_db_ms(target_ms: int) -> None:
    """Sleep until the database clock reaches target_ms (no longer)."""
    while (left := target_ms - db_now_ms()) >= 0:
        time.sleep(left / 1000 + 0.005)


# ---------------------------------------------------------------------------------------
# FIFO
# ---------------------------------------------------------------------------------------


def test_fifo_within_a_channel_one_by_one():
    sent = [enqueue("fifo", {"n": n}, channel="solo") for n in range(20)]
    got = []
    for _ in range(20):
        batch = dequeue("fifo", batch=1)
        assert len(batch) == 1, f"expected one message per call, got {batch} after {got}"
        got += ids(batch)
    assert got == sent
    assert dequeue("fifo") == []
    assert_healthy()


def test_fifo_within_a_channel_in_batches():
    sent = enqueue_many("fifo", [{"n": n} for n in range(25)], channel="solo")
    got = []
    while batch := dequeue("fifo", batch=7):
        got += ids(batch)
    assert got == sent


def test_fifo_holds_per_channel_when_channels_interleave():
    sent: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    for n in range(30):
        name = "abc"[n % 3] if n % 4 else "a"
        sent[name].append(enqueue("fifo", n, channel=name))
    seen: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    while batch := dequeue("fifo", batch=4):
        for row in batch:
            seen[row["channel"]].append(row["id"])
    assert seen == sent


def test_a_batch_comes_back_channel_by_channel_in_round_robin_order():
    a = enqueue_many("fifo", [1, 2, 3], channel="a")
    b = enqueue_many("fifo", [1, 2, 3], channel="b")
    got = dequeue("fifo", batch=6)
    # First message of each picked channel, then the second of each, and so on.
    assert ids(got) == [a[0], b[0], a[1], b[1], a[2], b[2]]


# ---------------------------------------------------------------------------------------
# Scheduling: not before run_at / delay
# ---------------------------------------------------------------------------------------


def test_delay_is_not_released_before_and_is_after():
    before = db_now_ms()
    message_id = enqueue("sched", {"job": 1}, delay=timedelta(milliseconds=300))
    dequeue_at = message_row(message_id)["dequeue_at"]
    assert before + 300 <= dequeue_at <= db_now_ms() + 300

    early = dequeue("sched", batch=10)
    checked_at = db_now_ms()
    if checked_at < dequeue_at:  # always, unless this machine stalled for 300 ms
        assert early == [], f"released {dequeue_at - checked_at} ms before its dequeue_at"
    # The idle worker's sleep: due within the delay, not now.
    assert 0 < named("next_due", queues=["sched"]) <= 300

    wait_until_db_ms(dequeue_at)
    got = dequeue("sched", batch=10)
    assert ids(got) == [message_id]
    assert got[0]["payload"] == {"job": 1}
    assert_healthy()


def test_run_at_is_not_released_before_and_is_after():
    run_at = timezone.now() + timedelta(milliseconds=300)
    later = enqueue("sched", "later", run_at=run_at)
    now = enqueue("sched", "now")
    dequeue_at = message_row(later)["dequeue_at"]
    assert abs(dequeue_at - int(run_at.timestamp() * 1000)) <= 1

    first = dequeue("sched", batch=10)
    # Judged on the database's clock, whatever this machine's speed: the dequeue ran at
    # lease_until - lease, and releases the scheduled message exactly when that is past run_at.
    dequeued_at = first[0]["lease_until"] - LEASE_MS
    assert ids(first) == ([now, later] if dequeued_at >= dequeue_at else [now])

    wait_until_db_ms(dequeue_at)
    assert ids(dequeue("sched", batch=10)) == ([] if later in ids(first) else [later])
    assert_healthy()


def test_a_scheduled_head_does_not_block_ready_messages_behind_it_in_id_order():
    far = enqueue("sched", "far", delay=3600)
    ready = enqueue("sched", "ready")
    assert ids(dequeue("sched", batch=10)) == [ready]
    assert message_row(far)["lease_until"] is None


def test_run_at_in_the_past_is_ready_and_goes_first():
    plain = enqueue("sched", "plain")
    past = enqueue("sched", "past", run_at=timezone.now() - timedelta(minutes=1))
    assert ids(dequeue("sched", batch=10)) == [past, plain]


# ---------------------------------------------------------------------------------------
# Priority
# ---------------------------------------------------------------------------------------


def test_higher_priority_is_released_first():
    normal = enqueue("prio", "normal")
    low = enqueue("prio", "low", priority=1)
    high = enqueue("prio", "high", priority=50)
    mid = enqueue("prio", "mid", priority=10)
    got = []
    while batch := dequeue("prio"):
        got += ids(batch)
    assert got == [high, mid, low, normal]
    assert message_row(high) is not None  # leased, not deleted
    assert_healthy()


def test_priority_acts_as_enqueued_earlier_so_old_normal_messages_still_go_first():
    now = db_now_ms()
    # A normal message that has waited 5 s beats an urgent one worth 3 steps of 1 s.
    old = enqueue_sql("prio", run_at_ms=now - 5_000)
    urgent = enqueue("prio", "urgent", priority=3)
    fresh = enqueue("prio", "fresh")
    row = message_row(urgent)
    assert now - 3_000 <= row["dequeue_at"] <= db_now_ms() - 3_000
    assert ids(dequeue("prio", batch=3)) == [old, urgent, fresh]


def test_priority_with_a_future_run_time_is_refused_in_python():
    before = counts()
    with pytest.raises(PriorityWithSchedule) as caught:
        enqueue("prio", "x", priority=5, delay=10)
    assert caught.value.field == "priority"
    assert "future run time" in str(caught.value)
    with pytest.raises(PriorityWithSchedule):
        enqueue("prio", "x", priority=1, run_at=timezone.now() + timedelta(minutes=1))
    with pytest.raises(PriorityWithSchedule):
        enqueue_many("prio", ["ok", Item("bad", priority=2, delay=1)])
    assert counts() == before


def test_priority_with_a_run_time_in_the_past_or_zero_delay_is_allowed():
    a = enqueue("prio", "a", priority=5, delay=0)
    b = enqueue("prio", "b", priority=5, run_at=timezone.now() - timedelta(seconds=1))
    assert message_row(a) is not None and message_row(b) is not None


def test_priority_with_a_future_run_time_is_refused_by_sql_with_lq002():
    before = counts()
    # Straight to lonnymq_enqueue_v1, no Python validation in the way.
    with pytest.raises(PriorityWithSchedule) as caught, transaction.atomic():
        enqueue_sql("prio", priority=5, delay_ms=60_000)
    assert caught.value.__cause__.__cause__.sqlstate == "LQ002"
    assert "cannot be combined with a future run time" in str(caught.value)
    now = db_now_ms()
    with pytest.raises(PriorityWithSchedule), transaction.atomic():
        enqueue_sql("prio", priority=1, run_at_ms=now + 60_000)
    assert counts() == before
