"""``lonnymq_enqueue_many_v1`` has two ways through: a set-based statement (batches without
priorities or delays: plain, dedup-keyed and scheduled batches, the Spark export's path) and a
scratch table (priorities, delays, or an invalid row to name). Both must give the same queue.
"""

from __future__ import annotations

import json
import random

import pytest

from .helpers import assert_healthy, db_now_ms, dequeue, messages_of, scalar

pytestmark = pytest.mark.django_db

CALL = """
SELECT lonnymq_enqueue_many_v1(%(queue)s, %(channels)s::text[], %(payloads)s::jsonb[],
                               %(run_at_ms)s::bigint[], NULL, %(priorities)s::integer[],
                               %(dedup_keys)s::text[], %(max_attempts)s::integer[], 5, 1000, 50)
"""


def call(queue, channels, payloads, *, run_at_ms=None, priorities=None, dedup_keys=None, max_attempts=None):
    return scalar(
        CALL,
        {
            "queue": queue,
            "channels": channels,
            "payloads": [json.dumps(p) for p in payloads],
            "run_at_ms": run_at_ms,
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
    channels = [f"t{rng.randrange(7)}" for _ in range(300)]
    keys = [None if rng.random() < 0.2 else f"k{rng.randrange(150)}" for _ in range(300)]
    payloads = [{"n": n} for n in range(300)]
    attempts = [rng.choice([None, 1, 9]) for _ in range(300)]
    return channels, payloads, keys, attempts


def test_both_paths_store_the_same_messages_and_return_the_same_duplicate_pattern():
    channels, payloads, keys, attempts = batch(7)
    # Earlier messages hold some of the keys in both queues.
    for queue in ("set_based", "scratch"):
        call(queue, ["t1", "t2"], [{"old": 1}, {"old": 2}], dedup_keys=["k3", "k4"])
    set_ids = call("set_based", channels, payloads, dedup_keys=keys, max_attempts=attempts)
    scratch_ids = call(
        "scratch", channels, payloads, dedup_keys=keys, max_attempts=attempts, priorities=[0] * len(payloads)
    )
    assert len(set_ids) == len(scratch_ids) == 300
    assert duplicate_pattern(set_ids) == duplicate_pattern(scratch_ids)
    assert stored("set_based") == stored("scratch")
    # Every returned id is a stored message (none is left pointing nowhere).
    assert set(set_ids) <= {m["id"] for m in messages_of("set_based")}
    assert_healthy()


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
    channels, payloads, keys, _ = batch(11)
    keys = [k or f"own-{n}" for n, k in enumerate(keys)]
    first = call("rerun", channels, payloads, dedup_keys=keys)
    before = scalar("SELECT count(*) FROM lonnymq_message")
    marks = scalar("SELECT count(*) FROM lonnymq_wake")
    again = call("rerun", channels, payloads, dedup_keys=keys)
    assert again == first
    assert scalar("SELECT count(*) FROM lonnymq_message") == before
    assert scalar("SELECT count(*) FROM lonnymq_wake") == marks  # nothing new, nothing to wake

