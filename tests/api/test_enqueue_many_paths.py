"""``lonnymq_enqueue_many_v1`` runs a valid batch as one set-based statement (dedup keys,
run times, delays and priorities included). It must store what the same rows enqueued one by
one with ``lonnymq_enqueue_v1`` would, keep FIFO within a channel, and refuse a batch with a
bad row as a whole, naming the row.
"""

from __future__ import annotations

import json
import random

import pytest
from django.db import transaction

from django_lonnymq.exceptions import InvalidArgument, PriorityWithSchedule
from tests.harness.helpers import assert_healthy, counts, db_now_ms, dequeue, enqueue_sql, messages_of, scalar

pytestmark = pytest.mark.django_db

CALL = """
SELECT lonnymq_enqueue_many_v1(%(queue)s, %(channels)s::text[], %(payloads)s::jsonb[],
                               %(run_at_ms)s::bigint[], %(delay_ms)s::bigint[], %(priorities)s::integer[],
                               %(dedup_keys)s::text[], %(max_attempts)s::integer[], 5, 1000, 50)
"""


def call(
    queue,
    channels,
    payloads,
    *,
    run_at_ms=None,
    delay_ms=None,
    priorities=None,
    dedup_keys=None,
    max_attempts=None,
):
    return scalar(
        CALL,
        {
            "queue": queue,
            "channels": channels,
            "payloads": [json.dumps(p) for p in payloads],
            "run_at_ms": run_at_ms,
            "delay_ms": delay_ms,
            "priorities": priorities,
            "dedup_keys": dedup_keys,
            "max_attempts": max_attempts,
        },
    )


def stored(queue):
    """The queue's messages without their ids: what each path must agree on."""
    return sorted(
        (m["channel_name"], json.dumps(m["payload"]), m["dedup_key"], m["max_attempts"], m["priority"])
        for m in messages_of(queue)
    )


def duplicate_pattern(ids):
    """Which positions share an id (first position of each id), independent of the id values."""
    first = {}
    return [first.setdefault(i, n) for n, i in enumerate(ids)]


def batch(seed):
    rng = random.Random(seed)
    n = 300
    channels = [f"t{rng.randrange(7)}" for _ in range(n)]
    keys = [None if rng.random() < 0.2 else f"k{rng.randrange(150)}" for _ in range(n)]
    payloads = [{"n": i} for i in range(n)]
    attempts = [rng.choice([None, 1, 9]) for _ in range(n)]
    priorities = [rng.choice([None, 0, 0, 3, 100]) for _ in range(n)]
    delays = [rng.choice([None, 60_000]) if not p else None for p in priorities]
    return channels, payloads, keys, attempts, priorities, delays


def test_a_batch_stores_what_the_same_rows_enqueued_one_by_one_would():
    channels, payloads, keys, attempts, priorities, delays = batch(7)
    for queue in ("batch", "one_by_one"):  # earlier messages hold some of the keys
        call(queue, ["t1", "t2"], [{"old": 1}, {"old": 2}], dedup_keys=["k3", "k4"])
    got = call(
        "batch", channels, payloads, dedup_keys=keys, max_attempts=attempts, priorities=priorities, delay_ms=delays
    )
    one_by_one = [
        enqueue_sql(
            "one_by_one",
            json.dumps(payloads[i]),
            channel=channels[i],
            delay_ms=delays[i],
            priority=priorities[i] or 0,
            dedup_key=keys[i],
            max_attempts=attempts[i] or 5,
        )
        for i in range(len(payloads))
    ]
    assert len(got) == len(one_by_one) == 300
    assert duplicate_pattern(got) == duplicate_pattern(one_by_one)
    assert stored("batch") == stored("one_by_one")
    # Every returned id is a stored message (none is left pointing nowhere).
    assert set(got) <= {m["id"] for m in messages_of("batch")}
    # The schedule: a delay holds a row back, a priority moves it earlier by that many steps.
    by_id = {m["id"]: m for m in messages_of("batch")}
    now = db_now_ms()
    for i, message_id in enumerate(got):
        if duplicate_pattern(got)[i] != i:
            continue  # a repeated key: the first row's message
        at = by_id[message_id]["dequeue_at"]
        if delays[i]:
            assert now < at <= now + 60_000
        elif priorities[i]:
            assert now - priorities[i] * 1000 - 60_000 < at <= now - priorities[i] * 1000
        else:
            assert now - 60_000 < at <= now
    assert_healthy()


@pytest.mark.parametrize(
    ("field", "bad", "error"),
    [
        ("priorities", [0, 101, 0], "priority must be between 0 and 100, got 101"),
        ("delay_ms", [None, None, -5], "delay must be between 0 and 3155760000000, got -5"),
        ("max_attempts", [1, 0, 1], "items[1].max_attempts must be between 1 and 1000"),
        ("dedup_keys", ["a", "", "b"], "items[1].dedup_key must be 1 to 200 characters"),
    ],
)
def test_a_bad_row_refuses_the_whole_batch_and_the_error_names_it(field, bad, error):
    before = counts()
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        call("bad", ["a", "b", "c"], [1, 2, 3], **{field: bad})
    assert error in str(caught.value)
    assert counts() == before


def test_priority_with_a_future_run_time_refuses_the_batch():
    before = counts()
    with pytest.raises(PriorityWithSchedule), transaction.atomic():
        call("bad", ["a", "b"], [1, 2], priorities=[0, 5], delay_ms=[None, 60_000])
    assert counts() == before


def test_ids_follow_input_order_so_a_batch_keeps_fifo_within_a_channel():
    names = ["b", "a", "c"] * 40
    keys = [f"row-{n}" for n in range(len(names))]
    got = call("fifo", names, [{"n": n} for n in range(len(names))], dedup_keys=keys)
    assert got == sorted(got) and len(set(got)) == len(got)
    delivered = dequeue("fifo", batch=500)
    for name in "abc":
        order = [r["payload"]["n"] for r in delivered if r["channel"] == name]
        assert order == sorted(order) and len(order) == 40


def test_run_times_with_dedup_keys_hold_back_the_future_rows():
    now = db_now_ms()
    got = call(
        "sched",
        ["c", "c", "d"],
        [{"n": 0}, {"n": 1}, {"n": 2}],
        run_at_ms=[None, now + 3_600_000, now - 5_000],
        dedup_keys=["a", "b", "c"],
    )
    by_id = {m["id"]: m for m in messages_of("sched")}
    assert by_id[got[1]]["dequeue_at"] == now + 3_600_000
    assert by_id[got[2]]["dequeue_at"] == now - 5_000
    assert sorted(r["payload"]["n"] for r in dequeue("sched", batch=10)) == [0, 2]
    assert_healthy()


def test_a_rerun_returns_the_first_ids_and_inserts_nothing():
    channels, payloads, keys, *_ = batch(11)
    keys = [k or f"own-{n}" for n, k in enumerate(keys)]
    first = call("rerun", channels, payloads, dedup_keys=keys)
    before = scalar("SELECT count(*) FROM lonnymq_message")
    marks = scalar("SELECT count(*) FROM lonnymq_wake")
    again = call("rerun", channels, payloads, dedup_keys=keys)
    assert again == first
    assert scalar("SELECT count(*) FROM lonnymq_message") == before
    assert scalar("SELECT count(*) FROM lonnymq_wake") == marks  # nothing new, nothing to wake



def test_deleting_a_channel_takes_its_wake_up_marks_with_it():
    """Marks are applied through the channel row; a deleted channel's marks would stay."""
    from django_lonnymq import api

    message_id = call("gone", ["c"], [{"n": 1}])[0]
    channel_id = messages_of("gone")[0]["channel_id"]
    assert scalar("SELECT count(*) FROM lonnymq_wake WHERE channel_id = %s", [channel_id]) == 1
    api.cancel([message_id])
    assert scalar("SELECT lonnymq_delete_channel_v1(%s)", [channel_id]) == "deleted"
    assert scalar("SELECT count(*) FROM lonnymq_wake WHERE channel_id = %s", [channel_id]) == 0
    assert_healthy()


def test_a_dequeue_applies_a_bulk_enqueues_marks_in_steps_and_loses_none():
    """One batch into 2,100 parked channels leaves 2,100 wake-up marks. A dequeue applies them
    200 at a time for about 10 ms (migration 0033: 10,000 at once took 111-141 ms a call at
    100,000 channels); the rest stay for the next calls. Every channel's message still comes
    out once in the first round, and no dequeue comes back short while messages are left."""
    names = [f"c{i:04d}" for i in range(2_100)]
    call("steps", names, [{"n": i} for i in range(2_100)])
    marks = "SELECT count(*) FROM lonnymq_wake WHERE queue = 'steps'"
    assert scalar(marks) == 2_100
    first = dequeue("steps", batch=100)
    applied = 2_100 - scalar(marks)
    assert len(first) == 100
    assert 0 < applied < 2_100 and applied % 200 == 0, applied
    seen = [r["channel"] for r in first]
    while len(seen) < 2_100:
        got = dequeue("steps", batch=100)
        assert len(got) == min(100, 2_100 - len(seen))
        seen += [r["channel"] for r in got]
    assert sorted(seen) == names
    assert scalar(marks) == 0
    assert dequeue("steps", batch=100) == []
    assert_healthy()
