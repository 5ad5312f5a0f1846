"""enqueue(slots=k): a message's lease takes k units of its channel's and its queue's
concurrency caps. A channel of cap 4 runs a 3-slot and a 1-slot message together and nothing
more; a message that asks more than is free waits, and nothing behind it passes; it waits
outside the eligible index (no dequeue spins on it) until an ack gives the slots back; the
queue-wide cap counts slots the same way; every path that gives a lease back gives its slots
back (the checker stays clean); bad slots and slots past a cap are refused before anything is
written; a cap shrunk below a message's slots runs it once the cap is all free."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from django_lonnymq import api, enqueue, enqueue_many
from django_lonnymq.api import Item
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.models import DeadMessage
from django_lonnymq.models import Message as MessageRow
from tests.harness.helpers import ack, channel_row, dequeue, fail, named, rows, scalar

pytestmark = pytest.mark.django_db


def in_flight(queue: str, channel: str = "default") -> int:
    row = channel_row(queue, channel)
    assert row is not None
    return int(row["in_flight"])


def queue_in_flight(queue: str) -> int:
    return int(scalar("SELECT in_flight FROM lonnymq_queue_config WHERE queue = %s", [queue]))


def next_due(queue: str) -> Any:
    return named("next_due", queues=[queue])


def problems() -> list[dict[str, Any]]:
    return rows("SELECT * FROM lonnymq_check_v2(0)")


def ids(leased: list[dict[str, Any]]) -> list[int]:
    return [m["id"] for m in leased]


def test_a_channel_runs_messages_while_their_slots_fit_its_cap():
    api.configure_channel("q_slots", "gpu", max_concurrency=4)
    three, one, two, last = enqueue_many(
        "q_slots", [Item({}, slots=3), Item({}), Item({}, slots=2), Item({})], channel="gpu"
    )
    first = dequeue("q_slots", batch=10)
    assert ids(first) == [three, one]  # 3 + 1 = 4 slots: the 2-slot message waits
    assert in_flight("q_slots", "gpu") == 4
    assert dequeue("q_slots", batch=10) == []
    ack([first[0]])  # the 3 slots come back: 1 of 4 taken, the 2-slot one fits
    second = dequeue("q_slots", batch=10)
    assert ids(second) == [two, last]
    assert in_flight("q_slots", "gpu") == 4
    ack(second + [first[1]])
    assert in_flight("q_slots", "gpu") == 0
    assert problems() == []


def test_a_message_that_asks_more_than_is_free_waits_and_nothing_passes_it():
    api.configure_channel("q_slots_fifo", "c", max_concurrency=3)
    small, big, behind = enqueue_many("q_slots_fifo", [Item({}), Item({}, slots=3), Item({})], channel="c")
    running = dequeue("q_slots_fifo", batch=10)
    assert ids(running) == [small]
    # 2 of 3 free, the next asks 3: nothing runs, the 1-slot message behind it included.
    assert dequeue("q_slots_fifo", batch=10) == []
    assert MessageRow.objects.get(id=behind).lease_until is None
    row = channel_row("q_slots_fifo", "c")
    assert (row["in_flight"], row["head_slots"]) == (1, 3)
    # It waits outside the eligible index: no idle worker is due to poll it.
    assert next_due("q_slots_fifo") is None
    ack(running)
    assert next_due("q_slots_fifo") is not None
    assert ids(dequeue("q_slots_fifo", batch=10)) == [big]
    assert in_flight("q_slots_fifo", "c") == 3


def test_the_queue_wide_cap_counts_slots_across_channels():
    api.configure_queue("q_slots_queue", max_concurrency=4)
    a = enqueue("q_slots_queue", {}, channel="a", slots=3)
    b = enqueue("q_slots_queue", {}, channel="b", slots=3)
    first = dequeue("q_slots_queue", batch=10)
    assert len(first) == 1 and first[0]["id"] in (a, b)
    assert queue_in_flight("q_slots_queue") == 3
    assert scalar("SELECT head_slots FROM lonnymq_queue_config WHERE queue = 'q_slots_queue'") == 3
    assert next_due("q_slots_queue") is None  # 1 of 4 free, the next asks 3: idle workers wait
    assert dequeue("q_slots_queue", batch=10) == []
    ack(first)
    assert queue_in_flight("q_slots_queue") == 0
    assert next_due("q_slots_queue") is not None
    assert ids(dequeue("q_slots_queue", batch=10)) == [b if first[0]["id"] == a else a]
    assert problems() == []


def test_without_a_cap_slots_change_nothing():
    enqueue_many("q_slots_free", [{"n": n} for n in range(20)], channel="c", slots=1000)
    assert len(dequeue("q_slots_free", batch=100)) == 20
    assert in_flight("q_slots_free", "c") == 0


def test_every_way_a_lease_ends_gives_its_slots_back():
    api.configure_channel("q_slots_back", "c", max_concurrency=10)
    api.configure_queue("q_slots_back", max_concurrency=10)
    retried, dead = enqueue_many(
        "q_slots_back", [Item({}, slots=4), Item({}, slots=5, max_attempts=1)], channel="c"
    )
    leased = {m["id"]: m for m in dequeue("q_slots_back", batch=10)}
    assert (in_flight("q_slots_back", "c"), queue_in_flight("q_slots_back")) == (9, 9)
    assert fail(leased[retried], retry_delay_ms=0) == "retry"  # unlease: 4 back
    assert (in_flight("q_slots_back", "c"), queue_in_flight("q_slots_back")) == (5, 5)
    assert fail(leased[dead]) == "dead"  # bury: 5 back
    assert (in_flight("q_slots_back", "c"), queue_in_flight("q_slots_back")) == (0, 0)
    assert DeadMessage.objects.get(id=dead).slots == 5
    assert api.requeue_dead([dead]) == [dead]
    assert MessageRow.objects.get(id=dead).slots == 5
    assert problems() == []


def test_a_cap_set_while_messages_run_counts_their_slots():
    running = enqueue("q_slots_late", {}, channel="c", slots=3)
    enqueue("q_slots_late", {}, channel="c")
    leased = dequeue("q_slots_late", batch=1)
    assert ids(leased) == [running]
    api.configure_channel("q_slots_late", "c", max_concurrency=4)
    api.configure_queue("q_slots_late", max_concurrency=4)
    assert (in_flight("q_slots_late", "c"), queue_in_flight("q_slots_late")) == (3, 3)
    assert problems() == []
    ack(leased)
    assert (in_flight("q_slots_late", "c"), queue_in_flight("q_slots_late")) == (0, 0)


def test_a_cap_shrunk_below_a_message_s_slots_runs_it_once_the_cap_is_free():
    api.configure_channel("q_slots_shrunk", "c", max_concurrency=4)
    big = enqueue("q_slots_shrunk", {}, channel="c", slots=4)
    after = enqueue("q_slots_shrunk", {}, channel="c")
    api.configure_channel("q_slots_shrunk", "c", max_concurrency=2)
    leased = dequeue("q_slots_shrunk", batch=5)
    assert ids(leased) == [big]  # alone: it takes the whole cap (counted as its 4 slots)
    assert in_flight("q_slots_shrunk", "c") == 4
    assert dequeue("q_slots_shrunk", batch=5) == []
    ack(leased)
    assert ids(dequeue("q_slots_shrunk", batch=5)) == [after]


@pytest.mark.parametrize(
    ("slots", "rule"),
    [(0, "must be between 1 and 1000000"), (-3, "must be between 1 and 1000000"),
     (10**7, "must be between 1 and 1000000"), (1.5, "must be an integer"), (True, "must be an integer"),
     ("2", "must be an integer"), (None, "must be an integer")],
)  # fmt: skip
def test_bad_slots_are_refused_by_name_before_anything_is_written(slots, rule):
    with pytest.raises(InvalidArgument) as single:
        enqueue("q_slots_bad", {}, slots=slots)
    assert (single.value.field, single.value.rule) == ("slots", rule)
    with pytest.raises(InvalidArgument) as batch:
        enqueue_many("q_slots_bad", [Item({}), Item({}, slots=slots if slots is not None else "x")])
    assert batch.value.field == "items[1].slots"
    assert not MessageRow.objects.exists()


def test_slots_past_a_cap_could_never_run_and_are_refused():
    api.configure_channel("q_slots_cap", "small", max_concurrency=2)
    with pytest.raises(InvalidArgument, match=r"slots must be at most the max_concurrency of channel 'small' \(2\)"), \
            transaction.atomic():  # fmt: skip
        enqueue("q_slots_cap", {}, channel="small", slots=3)
    with pytest.raises(InvalidArgument) as raised, transaction.atomic():
        enqueue_many("q_slots_cap", [Item({}, channel="other", slots=50), Item({}, channel="small", slots=3)])
    assert raised.value.field == "items[1].slots"
    api.configure_queue("q_slots_cap", max_concurrency=5)
    with pytest.raises(InvalidArgument, match="max_concurrency of queue 'q_slots_cap'"), transaction.atomic():
        enqueue("q_slots_cap", {}, channel="other", slots=6)
    assert not MessageRow.objects.exists()


def test_the_schema_refuses_slots_out_of_range():
    msg = enqueue("q_slots_schema", {})
    with pytest.raises(Exception, match="lonnymq_message_slots_range"), transaction.atomic():
        MessageRow.objects.filter(id=msg).update(slots=0)
    with pytest.raises(InvalidArgument) as raised, transaction.atomic():
        scalar(
            "SELECT lonnymq_enqueue_v4('q_slots_schema', 'default', '{}'::jsonb, NULL, NULL, 0, NULL, 'skip', 5,"
            " 1000, 50, 1, 0)"
        )
    assert raised.value.field == "slots"


def test_dedup_replace_takes_the_new_slots_and_update_keeps_them():
    first = enqueue("q_slots_keys", {"v": 1}, dedup_key="k", slots=3)
    assert enqueue("q_slots_keys", {"v": 2}, dedup_key="k", on_duplicate="replace", slots=5) == first
    assert MessageRow.objects.get(id=first).slots == 5
    enqueue("q_slots_keys", {"v": 3}, dedup_key="k", on_duplicate="update", slots=9)
    assert MessageRow.objects.get(id=first).slots == 5
