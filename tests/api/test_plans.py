"""Plans: named sets of limits that channels follow (api.configure_plan), a channel's own
limits over its plan's, a queue's default plan for its new channels, and api.check proving
that no channel's limits drifted from where they come from."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.db import connection, transaction

from django_lonnymq import api, enqueue, enqueue_many, publish
from django_lonnymq.exceptions import InvalidArgument, PlanInUse, UnknownPlan
from django_lonnymq.models import Channel, Plan, QueuePlan, Subscription
from django_lonnymq.rates import Rate
from tests.harness.helpers import ack, dequeue, scalar

pytestmark = pytest.mark.django_db


def limits(queue: str, name: str) -> tuple:
    channel = Channel.objects.get(queue=queue, name=name)
    return (channel.weight, channel.max_concurrency, channel.release_interval_ms, channel.rate)


def sources(queue: str, name: str) -> dict[str, str]:
    channel = Channel.objects.select_related("plan").get(queue=queue, name=name)
    return {limit: source for limit, _, source in channel.limit_sources()}


def _execute(statement: str, params=None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def test_a_channel_follows_its_plan_and_a_plan_change_reaches_every_channel():
    api.configure_plan("free", max_concurrency=1, rate="10 / min, burst 10")
    for n in range(5):
        api.configure_channel("saas", f"user-{n}", plan="free")
    assert limits("saas", "user-0") == (1, 1, 0, Rate.of("10 / min, burst 10"))
    assert sources("saas", "user-0") == dict.fromkeys(api.PLAN_LIMITS, "plan free")

    changed = api.configure_plan("free", weight=2, max_concurrency=3, release_interval=0.5, rate=None)
    assert changed == 5
    for n in range(5):
        assert limits("saas", f"user-{n}") == (2, 3, 500, None)
    plan = Plan.objects.get(name="free")
    assert (plan.weight, plan.max_concurrency, plan.release_interval_ms, plan.rate) == (2, 3, 500, None)
    # Nothing differs: no channel is written again.
    assert api.configure_plan("free", weight=2) == 0
    assert api.check() == []


def test_a_channels_own_limits_override_its_plan_and_can_follow_it_again():
    api.configure_plan("premium", weight=3, max_concurrency=20)
    api.configure_channel("saas", "big", plan="premium", max_concurrency=50)
    assert limits("saas", "big") == (3, 50, 0, None)
    assert sources("saas", "big") == {
        "weight": "plan premium", "max_concurrency": "own", "release_interval": "plan premium", "rate": "plan premium",
        "ordered": "plan premium",
    }  # fmt: skip
    api.configure_plan("premium", weight=5, max_concurrency=30)
    assert limits("saas", "big") == (5, 50, 0, None)  # the own cap stays
    # An own "unlimited" is an override too.
    api.configure_channel("saas", "big", max_concurrency=None)
    assert limits("saas", "big") == (5, None, 0, None)
    assert sources("saas", "big")["max_concurrency"] == "own"
    api.configure_channel("saas", "big", inherit=["max_concurrency"])
    assert limits("saas", "big") == (5, 30, 0, None)
    assert sources("saas", "big")["max_concurrency"] == "plan premium"
    # Leaving the plan: the limits that are not its own take the defaults.
    api.configure_channel("saas", "big", weight=7)
    api.configure_channel("saas", "big", plan=None)
    assert limits("saas", "big") == (7, None, 0, None)
    assert sources("saas", "big") == {
        "weight": "own", "max_concurrency": "default", "release_interval": "default", "rate": "default",
        "ordered": "default",
    }  # fmt: skip
    api.configure_channel("saas", "big", inherit=True)
    assert limits("saas", "big") == (1, None, 0, None)
    assert api.check() == []


def test_limits_set_before_plans_existed_are_the_channels_own():
    api.configure_channel("saas", "old", max_concurrency=4)
    channel = Channel.objects.get(queue="saas", name="old")
    assert channel.own_max_concurrency and not channel.own_weight
    api.configure_plan("basic", max_concurrency=1, weight=2)
    api.configure_channel("saas", "old", plan="basic")
    assert limits("saas", "old") == (2, 4, 0, None)


def test_new_channels_of_a_queue_take_its_default_plan_by_enqueue_and_by_publish():
    api.configure_plan("free", max_concurrency=1, rate="10 / min, burst 10")
    api.configure_plan("premium", weight=3, max_concurrency=20)
    api.configure_channel("saas", "before", max_concurrency=None)
    assert api.configure_queue("saas", default_plan="free") is False
    assert QueuePlan.objects.get(queue="saas").plan.name == "free"
    enqueue("saas", {"n": 1}, channel="by-enqueue")
    enqueue_many("saas", [1, 2], channel="by-enqueue-many")
    Subscription.objects.create(topic="signup", queue="saas")
    publish("signup", {"user": 1}, key="by-publish")
    for name in ("by-enqueue", "by-enqueue-many", "by-publish"):
        assert limits("saas", name) == (1, 1, 0, Rate.of("10 / min, burst 10")), name
        assert Channel.objects.get(queue="saas", name=name).plan.name == "free"
    # A channel that existed keeps what it had; another queue is not touched.
    assert Channel.objects.get(queue="saas", name="before").plan is None
    enqueue("other", 1, channel="x")
    assert Channel.objects.get(queue="other", name="x").plan is None
    # configure_channel into a new channel: the default plan, then the call's own limits.
    api.configure_channel("saas", "configured", weight=4)
    assert limits("saas", "configured") == (4, 1, 0, Rate.of("10 / min, burst 10"))
    # A named plan wins over the default.
    api.configure_channel("saas", "vip", plan="premium")
    assert limits("saas", "vip") == (3, 20, 0, None)
    # The queue's limits are left as they were; removing the default plan.
    assert api.configure_queue("saas", max_concurrency=100, default_plan=None) is True
    assert not QueuePlan.objects.filter(queue="saas").exists()
    enqueue("saas", 1, channel="after")
    assert Channel.objects.get(queue="saas", name="after").plan is None
    assert api.check() == []


def test_a_plan_that_gets_a_cap_counts_the_leases_already_running():
    api.configure_plan("tier")
    api.configure_channel("saas", "busy", plan="tier")
    enqueue_many("saas", list(range(5)), channel="busy")
    leased = dequeue("saas", batch=3)
    assert len(leased) == 3
    api.configure_plan("tier", max_concurrency=4)
    channel = Channel.objects.get(queue="saas", name="busy")
    assert (channel.max_concurrency, channel.in_flight) == (4, 3)
    assert len(dequeue("saas", batch=5)) == 1  # one slot left
    assert api.check() == []
    ack(leased)
    assert Channel.objects.get(queue="saas", name="busy").in_flight == 1
    assert api.check() == []


def test_api_check_reports_a_channel_whose_limits_drifted_from_its_plan():
    api.configure_plan("free", max_concurrency=1)
    api.configure_channel("saas", "u1", plan="free")
    api.configure_channel("saas", "u2", weight=5)
    assert api.check() == []
    # A row written behind the API's back: its plan says 1.
    _execute("UPDATE lonnymq_channel SET max_concurrency = 9 WHERE queue = 'saas' AND name = 'u1'")
    [problem] = api.check()
    assert (problem.queue, problem.channel, problem.problem) == ("saas", "u1", "limit_drift")
    assert problem.detail == "max_concurrency=9, but plan 'free' gives 1"
    # Without a plan, the defaults: a weight that is not the channel's own must be 1.
    _execute("UPDATE lonnymq_channel SET own_weight = false WHERE queue = 'saas' AND name = 'u2'")
    details = sorted(p.detail for p in api.check())
    assert details == ["max_concurrency=9, but plan 'free' gives 1", "weight=5, but the default gives 1"]
    # Setting it through the API mends it.
    api.configure_channel("saas", "u1", inherit=["max_concurrency"])
    api.configure_channel("saas", "u2", inherit=["weight"])
    assert api.check() == []


def test_deleting_a_plan_in_use_is_refused_with_the_counts():
    api.configure_plan("free", max_concurrency=1)
    api.configure_channel("saas", "u1", plan="free")
    api.configure_queue("other", default_plan="free")
    with pytest.raises(PlanInUse) as caught, transaction.atomic():
        api.delete_plan("free")
    assert (caught.value.channels, caught.value.queues) == (1, 1)
    assert "1 channel(s) follow it" in str(caught.value)
    assert Plan.objects.filter(name="free").exists()
    api.configure_channel("saas", "u1", plan=None)
    api.configure_queue("other", default_plan=None)
    api.delete_plan("free")
    assert not Plan.objects.filter(name="free").exists()
    with pytest.raises(UnknownPlan), transaction.atomic():
        api.delete_plan("free")


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: api.configure_channel("saas", "x", plan="gold"), "plan"),
        (lambda: api.configure_queue("saas", default_plan="gold"), "plan"),
        (lambda: api.configure_plan("p", weight=0), "weight"),
        (lambda: api.configure_plan("p", weight=1001), "weight"),
        (lambda: api.configure_plan("p", max_concurrency=0), "max_concurrency"),
        (lambda: api.configure_plan("p", max_concurrency=2**31), "max_concurrency"),
        (lambda: api.configure_plan("p", release_interval=math.nan), "release_interval"),
        (lambda: api.configure_plan("p", release_interval=math.inf), "release_interval"),
        (lambda: api.configure_plan("p", release_interval=timedelta(days=367)), "release_interval"),
        (lambda: api.configure_plan("p", rate="0 / s, burst 1"), "rate"),
        (lambda: api.configure_plan("p", weight=math.nan), "weight"),
        (lambda: api.configure_plan("bad\x00name"), "name"),
        (lambda: api.configure_plan(""), "name"),
        (lambda: api.configure_plan("x" * 101), "name"),
        (lambda: api.configure_channel("saas", "x", plan="bad\x00"), "plan"),
        (lambda: api.configure_channel("saas", "x", inherit=["colour"]), "inherit"),
        (lambda: api.configure_channel("saas", "x", inherit="weight"), "inherit"),
        (lambda: api.configure_queue("saas", default_plan="\x00"), "default_plan"),
    ],
)
def test_bad_input_is_refused_with_a_typed_error_and_nothing_is_written(call, field):
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        call()
    assert caught.value.field.startswith(field), caught.value
    assert not Plan.objects.exists()
    assert not Channel.objects.exists()
    assert not QueuePlan.objects.exists()


def test_the_sql_refuses_what_python_would_and_an_unknown_plan_is_typed():
    with pytest.raises(InvalidArgument), transaction.atomic():
        scalar("SELECT lonnymq_configure_plan_v1('p', 0)")
    with pytest.raises(InvalidArgument, match="inherit cannot name a limit the call also sets"), transaction.atomic():
        scalar("SELECT lonnymq_configure_channel_v4('q', 'c', p_weight => 2, p_inherit => ARRAY['weight'])")
    with pytest.raises(UnknownPlan) as caught, transaction.atomic():
        api.configure_channel("saas", "x", plan="gold")
    assert caught.value.field == "plan" and "'gold'" in str(caught.value)
    assert not Channel.objects.exists()


@pytest.mark.parametrize(
    ("statement", "constraint"),
    [
        ("INSERT INTO lonnymq_plan (name, weight) VALUES ('p', 0)", "lonnymq_plan_weight_range"),
        ("INSERT INTO lonnymq_plan (name, max_concurrency) VALUES ('p', 0)", "lonnymq_plan_max_concurrency_positive"),
        ("INSERT INTO lonnymq_plan (name, release_interval_ms) VALUES ('p', -1)", "lonnymq_plan_release_interval_range"),
        ("INSERT INTO lonnymq_plan (name, rate_count) VALUES ('p', 1)", "lonnymq_plan_rate_complete"),
        ("INSERT INTO lonnymq_plan (name) VALUES (' ')", "lonnymq_plan_name_not_blank"),
        ("INSERT INTO lonnymq_plan (name) VALUES ('')", "lonnymq_plan_name_length"),
    ],
)
def test_the_plan_table_checks_its_rules(statement, constraint):
    with pytest.raises(Exception, match=constraint), transaction.atomic():
        _execute(statement)


def test_the_saas_example_of_the_docs_runs_as_written():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "flow-control.md").read_text()
    section = text[text.index("## Plans") :]
    code = section[section.index("```python\n") + 10 : section.index("```\n", section.index("```python"))]
    exec(compile(code, "flow-control.md#plans", "exec"), {})
    assert limits("reports", "customer-42") == (3, 20, 0, None)
    assert Channel.objects.get(queue="reports", name="customer-42").plan.name == "premium"
    assert limits("reports", "customer-7") == (3, 20, 0, None)
    assert Plan.objects.get(name="free").rate == Rate.of("20 / min, burst 10")
    assert api.check() == []
