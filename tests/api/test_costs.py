"""enqueue(cost=k): a message takes k tokens of its channel's and its queue's token buckets.
A channel of 100 tokens releases 10 messages of cost 10, then waits for 10 tokens (not 1);
a cheaper message never passes a dearer one; the queue-wide bucket is spent the same way; a
cost past a bucket's burst is refused before anything is written, and one left behind by a
smaller bucket runs once the bucket is full; the dead letters keep the cost."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_lonnymq import api, enqueue, enqueue_many
from django_lonnymq.api import Item
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.models import DeadMessage
from django_lonnymq.models import Message as MessageRow
from tests.harness.helpers import channel_row, dequeue, scalar

pytestmark = pytest.mark.django_db


def now_ms() -> int:
    return int(scalar("SELECT lonnymq_now_ms_v1()"))


def test_a_channel_of_100_tokens_releases_ten_messages_of_cost_ten_then_waits_for_ten_tokens():
    api.configure_channel("q_cost", "llm", rate="100 / min, burst 100")
    enqueue_many("q_cost", [{"n": n} for n in range(30)], channel="llm", cost=10)
    assert len(dequeue("q_cost", batch=100)) == 10  # 100 tokens: 10 messages, not 100
    assert dequeue("q_cost", batch=100) == []
    row = channel_row("q_cost", "llm")
    # 10 tokens at 100 a minute: 6 s, not the 0.6 s of one token; the next turn waits too.
    assert 5_900 <= row["next_token_at"] - now_ms() <= 6_000
    assert row["next_dequeue_at"] >= row["next_token_at"]


def test_without_a_bucket_the_cost_changes_nothing():
    enqueue_many("q_cost_free", [{"n": n} for n in range(30)], channel="c", cost=1000)
    assert len(dequeue("q_cost_free", batch=100)) == 30


def test_a_cheaper_message_never_passes_a_dearer_one():
    api.configure_channel("q_cost_fifo", "c", rate="1 / h, burst 15")
    first, second, cheap = enqueue_many(
        "q_cost_fifo", [Item({"n": 1}, cost=10), Item({"n": 2}, cost=10), Item({"n": 3})], channel="c"
    )
    assert [m["id"] for m in dequeue("q_cost_fifo", batch=10)] == [first]
    # 5 tokens left: the second costs 10, so nothing runs, the cheap one behind it included.
    assert dequeue("q_cost_fifo", batch=10) == []
    assert MessageRow.objects.get(id=cheap).lease_until is None
    assert MessageRow.objects.get(id=second).lease_until is None


def test_the_queue_wide_bucket_is_spent_by_cost_across_channels():
    api.configure_queue("q_cost_queue", rate="10 / min, burst 10")
    for channel in ("a", "b"):
        enqueue_many("q_cost_queue", [{"n": n} for n in range(3)], channel=channel, cost=4)
    leased = dequeue("q_cost_queue", batch=10)
    assert sorted(m["channel"] for m in leased) == ["a", "b"]  # 8 of 10 tokens, round robin
    assert dequeue("q_cost_queue", batch=10) == []
    row = scalar("SELECT row_to_json(q) FROM lonnymq_queue_config q WHERE queue = 'q_cost_queue'")
    # 2 tokens left, 4 needed: 2 more at 10 a minute, 12 s.
    assert 11_900 <= row["next_token_at"] - now_ms() <= 12_000


@pytest.mark.parametrize(
    ("cost", "rule"),
    [(0, "must be between 1 and 1000000"), (-3, "must be between 1 and 1000000"),
     (10**7, "must be between 1 and 1000000"), (1.5, "must be an integer"), (True, "must be an integer"),
     ("2", "must be an integer")],
)  # fmt: skip
def test_a_bad_cost_is_refused_by_name_before_anything_is_written(cost, rule):
    with pytest.raises(InvalidArgument) as single:
        enqueue("q_cost_bad", {}, cost=cost)
    assert (single.value.field, single.value.rule) == ("cost", rule)
    with pytest.raises(InvalidArgument) as batch:
        enqueue_many("q_cost_bad", [Item({}), Item({}, cost=cost)])
    assert (batch.value.field, batch.value.rule) == ("items[1].cost", rule)
    assert not MessageRow.objects.exists()


def test_a_cost_past_a_bucket_could_never_run_and_is_refused():
    api.configure_channel("q_cost_burst", "small", rate="5 / min, burst 5")
    with pytest.raises(InvalidArgument, match=r"cost must be at most the burst of channel 'small'.*\(5\)"), \
            transaction.atomic():  # fmt: skip
        enqueue("q_cost_burst", {}, channel="small", cost=6)
    with pytest.raises(InvalidArgument) as raised, transaction.atomic():
        enqueue_many("q_cost_burst", [Item({}, channel="other", cost=50), Item({}, channel="small", cost=9)])
    assert raised.value.field == "items[1].cost"
    api.configure_queue("q_cost_burst", rate="3 / min, burst 3")
    with pytest.raises(InvalidArgument, match="burst of queue 'q_cost_burst'"), transaction.atomic():
        enqueue("q_cost_burst", {}, channel="other", cost=4)
    assert not MessageRow.objects.exists()


def test_a_message_a_smaller_bucket_cannot_hold_runs_once_the_bucket_is_full():
    api.configure_channel("q_cost_shrunk", "c", rate="10 / min, burst 10")
    big = enqueue("q_cost_shrunk", {}, channel="c", cost=10)
    api.configure_channel("q_cost_shrunk", "c", rate="4 / min, burst 4")  # a new rate: a full bucket
    # Charged the whole bucket (4), not held forever.
    assert [m["id"] for m in dequeue("q_cost_shrunk", batch=5)] == [big]
    assert channel_row("q_cost_shrunk", "c")["bucket_level"] == 0


def test_the_dead_letters_keep_the_cost_and_a_requeue_brings_it_back():
    msg = enqueue("q_cost_dead", {}, cost=7, max_attempts=1)
    [leased] = dequeue("q_cost_dead", batch=1)
    scalar(
        "SELECT lonnymq_fail_v2(%s, %s, 'boom', NULL, 'failed', 0, 0, 50)", [msg, str(leased["lease_token"])]
    )
    assert DeadMessage.objects.get(id=msg).cost == 7
    assert api.requeue_dead([msg]) == [msg]
    assert MessageRow.objects.get(id=msg).cost == 7


def test_dedup_replace_takes_the_new_cost_and_update_keeps_it():
    first = enqueue("q_cost_keys", {"v": 1}, dedup_key="k", cost=3)
    assert enqueue("q_cost_keys", {"v": 2}, dedup_key="k", on_duplicate="replace", cost=5) == first
    assert MessageRow.objects.get(id=first).cost == 5
    enqueue("q_cost_keys", {"v": 3}, dedup_key="k", on_duplicate="update", cost=9)
    assert MessageRow.objects.get(id=first).cost == 5
