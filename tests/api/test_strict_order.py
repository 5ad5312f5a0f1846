"""configure_channel(ordered=True): one message at a time, in release order. A message that
waits for its retry (or a snooze) keeps its place and holds its channel; a dead one blocks
the channel until it is requeued (back at the head) or skipped; other channels keep flowing;
the cap stays 1 while ordered; bad input is refused before anything is written."""

from __future__ import annotations

import time

import pytest
from django.db import transaction

from django_lonnymq import api, enqueue, enqueue_many
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.models import Channel
from tests.harness.helpers import ack, channel_row, dequeue, scalar

pytestmark = pytest.mark.django_db

Q = "q_ordered"


def fail(leased: dict, *, delay_ms: int | None = None, reason: str = "failed") -> str:
    return scalar(
        "SELECT lonnymq_fail_v2(%s, %s, 'boom', %s, %s, 0, 0, 50)",
        [leased["id"], str(leased["lease_token"]), delay_ms, reason],
    )


def ids(leased: list[dict]) -> list[int]:
    return [m["id"] for m in leased]


def test_an_ordered_channel_runs_one_at_a_time_and_a_retry_holds_the_ones_after_it():
    api.configure_channel(Q, "acme", ordered=True)
    first, second, third = enqueue_many(Q, [{"n": 1}, {"n": 2}, {"n": 3}], channel="acme")
    other = enqueue(Q, {"n": "other"}, channel="globex")
    got = dequeue(Q, batch=10)
    assert sorted(ids(got)) == sorted([first, other])  # one of acme's at a time
    acme = next(m for m in got if m["id"] == first)
    assert fail(acme, delay_ms=400) == "retry"
    # The retry keeps its place and holds the channel: the second does not pass it.
    assert dequeue(Q, batch=10) == []
    row = channel_row(Q, "acme")
    assert row["hold_until"] > scalar("SELECT lonnymq_now_ms_v1()") and row["blocked_by"] is None
    time.sleep(0.45)
    [again] = dequeue(Q, batch=10)
    assert again["id"] == first and again["attempts"] == 2
    ack([again])
    assert ids(dequeue(Q, batch=10)) == [second]
    assert api.check() == []


def test_a_dead_message_blocks_its_channel_until_it_is_requeued_at_the_head():
    api.configure_channel(Q, "acme", ordered=True)
    first, second = enqueue_many(Q, [{"n": 1}, {"n": 2}], channel="acme", max_attempts=1)
    [leased] = dequeue(Q, batch=10)
    assert fail(leased) == "dead"
    other = enqueue(Q, {"n": "other"}, channel="globex")
    assert ids(dequeue(Q, batch=10)) == [other]  # acme is blocked, globex flows
    [blocked] = api.blocked_channels(Q)
    assert (blocked.channel, blocked.message_id, blocked.reason, blocked.last_error) == ("acme", first, "failed", "boom")
    assert api.check() == []  # blocked, not stranded
    # An enqueue into the blocked channel does not make it due: idle workers sleep on.
    enqueue(Q, {"n": 3}, channel="acme")
    assert dequeue(Q, batch=10) == []
    assert scalar("SELECT lonnymq_next_due_v1(ARRAY[%s])", [Q]) >= channel_row(Q, "acme")["hold_until"]
    assert api.requeue_dead([first]) == [first]
    assert api.blocked_channels(Q) == []
    assert ids(dequeue(Q, batch=10)) == [first]  # back at the head, before the second


def test_an_operator_skips_the_dead_message_and_the_channel_goes_on():
    api.configure_channel(Q, "acme", ordered=True)
    first, second = enqueue_many(Q, [{"n": 1}, {"n": 2}], channel="acme", max_attempts=1)
    [leased] = dequeue(Q, batch=10)
    fail(leased, reason="discarded")
    assert dequeue(Q, batch=10) == []
    assert api.unblock_channel(Q, "acme") == first
    assert api.unblock_channel(Q, "acme") is None  # not blocked any more
    assert ids(dequeue(Q, batch=10)) == [second]
    assert scalar("SELECT count(*) FROM lonnymq_dead_message WHERE id = %s", [first]) == 1


def test_turning_order_off_lifts_a_block_and_the_cap_may_change_again():
    api.configure_channel(Q, "acme", ordered=True)
    first, second, third = enqueue_many(Q, [{"n": 1}, {"n": 2}, {"n": 3}], channel="acme", max_attempts=1)
    fail(dequeue(Q, batch=10)[0])
    api.configure_channel(Q, "acme", ordered=False, max_concurrency=None)
    row = channel_row(Q, "acme")
    assert (row["ordered"], row["hold_until"], row["blocked_by"], row["max_concurrency"]) == (False, None, None, None)
    assert sorted(ids(dequeue(Q, batch=10))) == [second, third]


def test_a_snooze_in_an_ordered_channel_holds_it_too():
    api.configure_channel(Q, "acme", ordered=True)
    first, second = enqueue_many(Q, [{"n": 1}, {"n": 2}], channel="acme")
    [leased] = dequeue(Q, batch=10)
    assert scalar(
        "SELECT lonnymq_snooze_v1(%s, %s, 60000, 10, 0, 0, 50)", [leased["id"], str(leased["lease_token"])]
    ) == "snoozed"
    assert dequeue(Q, batch=10) == []
    assert Channel.objects.get(queue=Q, name="acme").hold_until is not None


def test_an_unordered_channel_is_unchanged_a_failing_message_lets_the_next_one_run():
    first, second = enqueue_many(Q, [{"n": 1}, {"n": 2}], channel="plain")
    [leased, _] = dequeue(Q, batch=1) + [None]
    fail(leased, delay_ms=60_000)
    assert ids(dequeue(Q, batch=10)) == [second]
    assert channel_row(Q, "plain")["hold_until"] is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"ordered": "yes"}, "ordered"), ({"ordered": True, "max_concurrency": 3}, "max_concurrency"),
     ({"ordered": True, "inherit": ["max_concurrency"]}, "inherit")],
)  # fmt: skip
def test_bad_order_settings_are_refused_before_anything_is_written(kwargs, field):
    with pytest.raises(InvalidArgument) as raised:
        api.configure_channel(Q, "acme", **kwargs)
    assert raised.value.field == field
    assert not Channel.objects.filter(queue=Q).exists()


def test_the_cap_of_an_ordered_channel_stays_one():
    api.configure_channel(Q, "acme", ordered=True)
    with pytest.raises(InvalidArgument, match="must stay 1 while the channel is ordered"), transaction.atomic():
        api.configure_channel(Q, "acme", max_concurrency=5)
    assert channel_row(Q, "acme")["max_concurrency"] == 1
    with pytest.raises(InvalidArgument, match="must name a channel of queue"), transaction.atomic():
        api.unblock_channel(Q, "nobody")
    with pytest.raises(InvalidArgument, match="limit"):
        api.blocked_channels(Q, limit=0)
