"""configure_plan(ordered=True): every channel that follows the plan and does not set its order
itself becomes ordered in the statement that changes the plan, and so is every new channel on
the plan (an enqueue, a queue's default plan, configure_channel(plan=)); a failing message
holds its channel; ordered=False lifts the holds at once; a channel's own setting wins and
inherit=["ordered"] gives it back to the plan; bad input is refused before anything is written."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from django_lonnymq import api, enqueue, enqueue_many
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.models import Channel, Plan
from tests.api.test_strict_order import fail, ids
from tests.harness.helpers import channel_row, dequeue, scalar

pytestmark = pytest.mark.django_db

Q = "q_ordered_plan"


def ordered(name: str) -> tuple[bool, int | None, bool]:
    row = channel_row(Q, name)
    return row["ordered"], row["max_concurrency"], row["own_ordered"]


def test_a_plan_made_ordered_orders_its_channels_old_and_new_in_one_statement():
    api.configure_plan("webhooks", max_concurrency=5)
    api.configure_channel(Q, "old", plan="webhooks")
    api.configure_queue(Q, default_plan="webhooks")
    assert ordered("old") == (False, 5, False)
    assert api.configure_plan("webhooks", ordered=True) == 1
    plan = Plan.objects.get(name="webhooks")
    assert (plan.ordered, plan.max_concurrency) == (True, 1)  # ordered=True made the cap 1
    assert ordered("old") == (True, 1, False)
    # New channels: by an enqueue (the queue's default plan), and by configure_channel(plan=).
    enqueue(Q, {"n": 1}, channel="by-enqueue")
    api.configure_channel(Q + "_other", "named", plan="webhooks")
    assert ordered("by-enqueue") == (True, 1, False)
    assert channel_row(Q + "_other", "named")["ordered"] is True
    assert api.check() == []


def test_a_failing_message_holds_its_channel_and_turning_the_plan_off_lifts_the_hold():
    api.configure_plan("webhooks", ordered=True)
    api.configure_queue(Q, default_plan="webhooks")
    first, second, third = enqueue_many(Q, [{"n": 1}, {"n": 2}, {"n": 3}], channel="acme")
    [leased] = dequeue(Q, batch=10)  # one at a time
    assert leased["id"] == first
    assert fail(leased, delay_ms=60_000) == "retry"
    assert dequeue(Q, batch=10) == []  # the retry holds the ones after it
    assert channel_row(Q, "acme")["hold_until"] is not None
    assert api.configure_plan("webhooks", ordered=False, max_concurrency=None) == 1
    row = channel_row(Q, "acme")
    assert (row["ordered"], row["hold_until"], row["blocked_by"], row["max_concurrency"]) == (
        False,
        None,
        None,
        None,
    )
    # At once, the retried message too (it kept its place), not after the retry's minute.
    assert sorted(ids(dequeue(Q, batch=10))) == [first, second, third]
    assert api.check() == []


def test_turning_the_plan_off_unblocks_a_channel_a_dead_message_blocked():
    api.configure_plan("webhooks", ordered=True)
    api.configure_channel(Q, "acme", plan="webhooks")
    first, second = enqueue_many(Q, [{"n": 1}, {"n": 2}], channel="acme", max_attempts=1)
    assert fail(dequeue(Q, batch=10)[0]) == "dead"
    assert [b.channel for b in api.blocked_channels(Q)] == ["acme"]
    api.configure_plan("webhooks", ordered=False)
    assert api.blocked_channels(Q) == []
    assert ids(dequeue(Q, batch=10)) == [second]


def test_a_channels_own_order_wins_and_inherit_gives_it_back_to_the_plan():
    api.configure_plan("webhooks", ordered=True)
    api.configure_channel(Q, "opted-out", plan="webhooks", ordered=False, max_concurrency=4)
    api.configure_channel(Q, "own", ordered=True)
    api.configure_channel(Q, "own", plan="webhooks")
    assert ordered("opted-out") == (False, 4, True)
    api.configure_plan("webhooks", ordered=False)
    assert ordered("own") == (True, 1, True)  # its own order stays
    api.configure_plan("webhooks", ordered=True)
    assert ordered("opted-out") == (False, 4, True)  # so does its own unordered
    api.configure_channel(Q, "opted-out", inherit=["ordered", "max_concurrency"])
    assert ordered("opted-out") == (True, 1, False)
    # Leaving the plan: the order it gave goes, with the plan's cap.
    api.configure_channel(Q, "opted-out", plan=None)
    assert ordered("opted-out") == (False, None, False)
    assert api.check() == []


def test_a_channel_whose_own_cap_is_not_one_stops_the_plan_being_ordered_and_says_which():
    api.configure_plan("webhooks")
    api.configure_channel(Q, "big", plan="webhooks", max_concurrency=8)
    with pytest.raises(InvalidArgument, match="cannot order channel 'big'") as raised, transaction.atomic():
        api.configure_plan("webhooks", ordered=True)
    assert raised.value.field == "ordered"
    assert Plan.objects.get(name="webhooks").ordered is False
    assert ordered("big") == (False, 8, False)
    # Joining an ordered plan with a cap of its own other than 1 is refused the same way.
    api.configure_plan("strict", ordered=True)
    with (
        pytest.raises(InvalidArgument, match="plan 'strict' orders the channel") as raised,
        transaction.atomic(),
    ):
        api.configure_channel(Q, "big", plan="strict")
    assert raised.value.field == "max_concurrency"
    assert channel_row(Q, "big")["plan_id"] == Plan.objects.get(name="webhooks").pk


def test_the_cap_of_an_ordered_plan_stays_one_and_an_ordered_channel_keeps_its_cap():
    api.configure_plan("webhooks", ordered=True)
    with (
        pytest.raises(InvalidArgument, match="must stay 1 while the plan is ordered") as raised,
        transaction.atomic(),
    ):
        api.configure_plan("webhooks", max_concurrency=3)
    assert raised.value.field == "max_concurrency"
    # A channel ordered on its own whose cap follows the plan's 1 keeps the plan's cap at 1.
    api.configure_plan("loose", max_concurrency=1)
    api.configure_channel(Q, "own", plan="loose", ordered=True)
    api.configure_channel(Q, "own", inherit=["max_concurrency"])
    with pytest.raises(InvalidArgument, match="channel 'own' of queue") as raised, transaction.atomic():
        api.configure_plan("loose", max_concurrency=3)
    assert raised.value.field == "max_concurrency"
    assert Plan.objects.get(name="loose").max_concurrency == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"ordered": True, "max_concurrency": 3}, "max_concurrency"),
     ({"ordered": True, "max_concurrency": None}, "max_concurrency"),
     ({"ordered": "yes"}, "ordered"), ({"ordered": 1}, "ordered"), ({"ordered": None}, "ordered")],
)  # fmt: skip
def test_bad_input_is_refused_before_anything_is_written(kwargs, field):
    with pytest.raises(InvalidArgument) as raised:
        api.configure_plan("webhooks", **kwargs)
    assert raised.value.field == field
    assert not Plan.objects.filter(name="webhooks").exists()


def test_the_sql_and_the_plan_table_refuse_what_python_would():
    with pytest.raises(InvalidArgument, match="must be 1 for an ordered plan"), transaction.atomic():
        scalar("SELECT lonnymq_configure_plan_v2('webhooks', p_max_concurrency => 3, p_ordered => true)")
    with pytest.raises(InvalidArgument, match="must be 1 for an ordered plan"), transaction.atomic():
        scalar("SELECT lonnymq_configure_plan_v2('webhooks', p_unlimited => true, p_ordered => true)")
    assert not Plan.objects.filter(name="webhooks").exists()
    for cap in ("3", "NULL"):
        with pytest.raises(IntegrityError, match="lonnymq_plan_ordered_one_at_a_time"), transaction.atomic():
            scalar(f"INSERT INTO lonnymq_plan (name, ordered, max_concurrency) VALUES ('x', true, {cap})")
    with pytest.raises(InvalidArgument, match="inherit"), transaction.atomic():
        api.configure_channel(Q, "acme", ordered=True, inherit=["ordered"])
    assert not Channel.objects.filter(queue=Q).exists()


def test_the_previous_releases_configure_plan_keeps_an_ordered_plans_cap():
    api.configure_plan("webhooks", ordered=True)
    with pytest.raises(IntegrityError, match="lonnymq_plan_ordered_one_at_a_time"), transaction.atomic():
        scalar("SELECT lonnymq_configure_plan_v1('webhooks', p_max_concurrency => 3)")
    assert scalar("SELECT lonnymq_configure_plan_v1('webhooks', p_weight => 2)") == 0


def test_check_reports_an_order_that_drifted_from_the_plan():
    api.configure_plan("webhooks", ordered=True)
    api.configure_channel(Q, "acme", plan="webhooks")
    scalar("UPDATE lonnymq_channel SET ordered = false WHERE queue = %s RETURNING 1", [Q])
    [problem] = api.check()
    assert (problem.channel, problem.problem) == ("acme", "limit_drift")
    assert problem.detail == "ordered=false, but plan 'webhooks' gives true"
