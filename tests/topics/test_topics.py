"""publish / publish_many / subscriptions against the real SQL: routing, keys, dedup,
unrouted counts, and bad input refused with a typed error before anything is written."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from django_lonnymq import Event, api, bounds, publish, publish_many, subscribe, topics
from django_lonnymq.exceptions import InvalidArgument, PayloadError, sql_errors
from django_lonnymq.models import Message, Subscription, Unrouted
from django_lonnymq.topics import declared, sync_subscriptions, unsubscribe_declared

pytestmark = pytest.mark.django_db


@pytest.fixture
def groups() -> list[str]:
    for queue in ("billing", "emails", "search"):
        Subscription.objects.create(topic="orders.created", queue=queue)
    Subscription.objects.create(topic="other", queue="billing")
    return ["billing", "emails", "search"]


def queue_of(message_id: int) -> tuple[str, str]:
    message = Message.objects.select_related("channel").get(pk=message_id)
    return message.channel.queue, message.channel.name


def test_publish_writes_one_message_per_subscribed_queue_in_queue_name_order(groups, statement_binding):
    ids = publish("orders.created", {"order": 7}, key="customer-42")
    assert [queue_of(i) for i in ids] == [(q, "customer-42") for q in groups]
    assert {Message.objects.get(pk=i).payload["order"] for i in ids} == {7}
    # No key: the default channel.
    assert {queue_of(i)[1] for i in publish("orders.created", {"order": 8})} == {"default"}


def test_publish_many_returns_each_events_ids_and_keeps_order_within_a_key(groups, statement_binding):
    events = [Event({"n": n}, key=f"k{n % 3}") for n in range(9)]
    ids = publish_many("orders.created", events)
    assert len(ids) == 9 and all(len(row) == 3 for row in ids)
    for column, queue in enumerate(groups):
        for key in ("k0", "k1", "k2"):
            mine = [row[column] for row, e in zip(ids, events, strict=True) if e.key == key]
            assert mine == sorted(mine)  # ids (and so release order) follow publish order
            assert {queue_of(i) for i in mine} == {(queue, key)}
    # Bare payloads take the call's key.
    assert {queue_of(row[0])[1] for row in publish_many("orders.created", [{"a": 1}, {"a": 2}], key="bulk")} == {"bulk"}


def test_a_dedup_key_deduplicates_within_each_group():
    Subscription.objects.create(topic="t", queue="q1")
    Subscription.objects.create(topic="t", queue="q2")
    first = publish("t", {"v": 1}, key="k", dedup_key="event-1")
    again = publish("t", {"v": 2}, key="k", dedup_key="event-1")
    assert first == again and Message.objects.count() == 2


def test_run_at_schedules_every_groups_message():
    Subscription.objects.create(topic="t", queue="q1")
    when = timezone.now() + timedelta(hours=1)
    [message_id] = publish("t", {}, run_at=when)
    assert Message.objects.get(pk=message_id).dequeue_at == int(when.timestamp() * 1000)


def test_a_topic_without_subscriber_is_counted_not_an_error():
    assert publish("nobody.listens", {"x": 1}) == []
    assert publish_many("nobody.listens", [{"x": 2}, {"x": 3}, {"x": 4}]) == [[], [], []]
    counter = Unrouted.objects.get(topic="nobody.listens")
    assert counter.events == 4
    assert Message.objects.count() == 0
    # Rolled back with the caller's transaction, like the messages would be.
    with pytest.raises(RuntimeError), transaction.atomic():
        publish("nobody.listens", {"x": 5})
        raise RuntimeError
    assert Unrouted.objects.get(topic="nobody.listens").events == 4


def test_a_rolled_back_publish_leaves_no_message(groups):
    with pytest.raises(RuntimeError), transaction.atomic():
        assert len(publish("orders.created", {"x": 1})) == 3
        raise RuntimeError
    assert Message.objects.count() == 0


def test_a_publish_holds_one_advisory_lock_per_group_and_key_until_it_commits(groups):
    """What docs/topics.md bounds the number of groups by: each group's channel lock, one per
    distinct key, taken from the server's shared lock table and held to the end."""
    with transaction.atomic(), connection.cursor() as cursor:
        publish_many("orders.created", [Event({"n": n}, key=f"k{n % 2}") for n in range(10)])
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted"
        )
        assert cursor.fetchone()[0] == len(groups) * 2


def test_publish_many_of_nothing_writes_nothing(groups):
    assert publish_many("orders.created", []) == []
    assert Message.objects.count() == 0 and not Unrouted.objects.exists()


class NotJson:
    pass


@pytest.mark.parametrize(
    ("call", "field", "error"),
    [
        (lambda: publish("", {}), "topic", InvalidArgument),
        (lambda: publish("   ", {}), "topic", InvalidArgument),
        (lambda: publish("t" * 201, {}), "topic", InvalidArgument),
        (lambda: publish("a\x00b", {}), "topic", InvalidArgument),
        (lambda: publish(None, {}), "topic", InvalidArgument),
        (lambda: publish("orders.created", NotJson()), "events[0].payload", PayloadError),
        (lambda: publish("orders.created", {"x": math.nan}), "events[0].payload", PayloadError),
        (lambda: publish("orders.created", {"x": "\x00"}), "events[0].payload", PayloadError),
        (lambda: publish("orders.created", {}, key=""), "events[0].key", InvalidArgument),
        (lambda: publish("orders.created", {}, key="k" * 201), "events[0].key", InvalidArgument),
        (lambda: publish("orders.created", {}, dedup_key=" "), "events[0].dedup_key", InvalidArgument),
        (lambda: publish("orders.created", {}, run_at=timezone.now().replace(tzinfo=None)), "events[0].run_at", InvalidArgument),
        (lambda: publish_many("orders.created", [{}, Event({}, key="\x00")]), "events[1].key", InvalidArgument),
        (lambda: publish_many("orders.created", [{"ok": 1}, {"bad": {1, 2}}]), "events[1].payload", PayloadError),
        (lambda: publish_many("orders.created", {"not": "a list"}), "events", InvalidArgument),
        (lambda: publish_many("orders.created", [{}], key=" "), "key", InvalidArgument),
        (lambda: publish("orders.created", {}, using="nowhere"), "using", InvalidArgument),
    ],
)  # fmt: skip
def test_bad_input_is_refused_naming_the_field_and_nothing_is_written(groups, call, field, error):
    with pytest.raises(error) as caught:
        call()
    assert type(caught.value) is error
    assert caught.value.field == field
    assert Message.objects.count() == 0 and not Unrouted.objects.exists()


def costs_of(ids: list[int]) -> list[int]:
    return [Message.objects.get(pk=i).cost for i in ids]


def test_a_cost_is_stored_on_every_groups_message(groups, statement_binding):
    assert costs_of(publish("orders.created", {"n": 1}, cost=3)) == [3, 3, 3]
    assert costs_of(publish("orders.created", {"n": 2})) == [1, 1, 1]
    events = [Event({"n": 3}, cost=5), Event({"n": 4}), {"n": 5}, Event({"n": 6}, cost=1)]
    rows = publish_many("orders.created", events, cost=2)
    # An event's own cost, else the call's, in every group.
    assert [costs_of(row) for row in rows] == [[5] * 3, [2] * 3, [2] * 3, [1] * 3]
    rows = publish_many("orders.created", [Event({"n": 7}, cost=bounds.MAX_COST), {"n": 8}])
    assert [costs_of(row) for row in rows] == [[bounds.MAX_COST] * 3, [1] * 3]


@pytest.mark.parametrize("cost", [0, -1, 2.5, True, bounds.MAX_COST + 1, "2"])
@pytest.mark.parametrize("topic", ["orders.created", "nobody.listens"])
def test_a_bad_cost_is_refused_naming_the_field_and_nothing_is_written(groups, topic, cost):
    calls = [
        (lambda: publish(topic, {}, cost=cost), "cost"),
        (lambda: publish_many(topic, [{}], cost=cost), "cost"),
        (lambda: publish_many(topic, [Event({}), Event({}, cost=cost)]), "events[1].cost"),
    ]
    for call, field in calls:
        with pytest.raises(InvalidArgument) as caught:
            call()
        assert caught.value.field == field
    assert Message.objects.count() == 0 and not Unrouted.objects.exists()


def test_a_cost_past_one_groups_burst_refuses_the_event_in_every_group(groups):
    api.configure_channel("emails", "k", rate="5 / min, burst 5")
    with pytest.raises(InvalidArgument, match=r"burst of channel 'k'.*\(5\)"), transaction.atomic():
        publish("orders.created", {}, key="k", cost=6)
    assert Message.objects.count() == 0
    assert costs_of(publish("orders.created", {}, key="k", cost=5)) == [5, 5, 5]


def test_the_sql_function_checks_costs_itself_routed_or_not(groups):
    """What a caller that skips the Python layer gets, whether the topic has groups or not."""
    statement = "SELECT count(*) FROM lonnymq_publish_v4(%s, NULL, %s::jsonb[], p_costs => %s::integer[])"
    bad = [(["{}", "{}"], [1, 0], "items[1].cost"), (["{}"], [1_000_001], "items[0].cost"), (["{}"], [2, 2], "events")]
    for topic in ("orders.created", "nobody.listens"):
        for payloads, costs, field in bad:
            with pytest.raises(InvalidArgument) as caught, transaction.atomic(), sql_errors(), connection.cursor() as cursor:
                cursor.execute(statement, [topic, payloads, costs])
            assert caught.value.field == field
    assert Message.objects.count() == 0 and not Unrouted.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute(statement, ["orders.created", ["{}", "{}"], [4, None]])
    assert sorted(Message.objects.values_list("cost", flat=True)) == [1, 1, 1, 4, 4, 4]


def slots_of(ids: list[int]) -> list[int]:
    return [Message.objects.get(pk=i).slots for i in ids]


def test_slots_are_stored_on_every_groups_message(groups, statement_binding):
    assert slots_of(publish("orders.created", {"n": 1}, slots=3)) == [3, 3, 3]
    rows = publish_many("orders.created", [Event({"n": 2}, slots=5), {"n": 3}], slots=2)
    assert [slots_of(row) for row in rows] == [[5] * 3, [2] * 3]


@pytest.mark.parametrize("slots", [0, -1, 2.5, True, bounds.MAX_SLOTS + 1, "2"])
@pytest.mark.parametrize("topic", ["orders.created", "nobody.listens"])
def test_bad_slots_are_refused_naming_the_field_and_nothing_is_written(groups, topic, slots):
    calls = [
        (lambda: publish(topic, {}, slots=slots), "slots"),
        (lambda: publish_many(topic, [{}], slots=slots), "slots"),
        (lambda: publish_many(topic, [Event({}), Event({}, slots=slots)]), "events[1].slots"),
    ]
    for call, field in calls:
        with pytest.raises(InvalidArgument) as caught:
            call()
        assert caught.value.field == field
    assert Message.objects.count() == 0 and not Unrouted.objects.exists()


def test_slots_past_one_groups_cap_refuse_the_event_in_every_group(groups):
    api.configure_channel("emails", "k", max_concurrency=2)
    with pytest.raises(InvalidArgument, match=r"max_concurrency of channel 'k' \(2\)"), transaction.atomic():
        publish("orders.created", {}, key="k", slots=3)
    assert Message.objects.count() == 0
    assert slots_of(publish("orders.created", {}, key="k", slots=2)) == [2, 2, 2]


def test_the_sql_function_checks_slots_itself_routed_or_not(groups):
    statement = "SELECT count(*) FROM lonnymq_publish_v4(%s, NULL, %s::jsonb[], p_slots => %s::integer[])"
    for topic in ("orders.created", "nobody.listens"):
        with pytest.raises(InvalidArgument) as caught, transaction.atomic(), sql_errors(), connection.cursor() as cursor:
            cursor.execute(statement, [topic, ["{}", "{}"], [1, 0]])
        assert caught.value.field == "items[1].slots"
    assert Message.objects.count() == 0 and not Unrouted.objects.exists()


def test_the_sql_function_refuses_bad_keys_and_topics_itself():
    """What a caller that skips the Python layer gets: the same typed errors, nothing written."""
    statement = (
        "SELECT * FROM lonnymq_publish_v1(%s::text, %s::text[], %s::jsonb[], NULL::bigint[], NULL::text[],"
        " 5, 1000::bigint, 50::bigint)"
    )
    Subscription.objects.create(topic="t", queue="q1")
    for args, field in [(("t", ["ok", " "], ['{"a":1}', '{"a":2}']), "events[1].key"), (("", None, ["{}"]), "topic")]:
        with pytest.raises(InvalidArgument) as caught, transaction.atomic(), sql_errors(), connection.cursor() as cursor:
            cursor.execute(statement, args)
        assert caught.value.field == field
    assert Message.objects.count() == 0


def test_a_subscription_to_a_too_long_queue_name_is_refused_everywhere():
    too_long = "q" * 101
    with pytest.raises(InvalidArgument) as caught:
        subscribe("orders.created", queue=too_long)
    assert caught.value.field == "queue" and "1 to 100 characters" in str(caught.value)
    with pytest.raises(InvalidArgument) as caught:
        subscribe("", queue="billing")
    assert caught.value.field == "topic"
    assert ("orders.created", too_long) not in declared()
    # The admin's path: the model's validation names the field.
    with pytest.raises(ValidationError) as invalid:
        Subscription(topic="orders.created", queue=too_long).full_clean()
    assert "queue" in invalid.value.message_dict
    with pytest.raises(ValidationError) as invalid:
        Subscription(topic="  ", queue="billing").full_clean()
    assert "Topic must not be only blanks." in str(invalid.value)
    # Direct SQL: the named CHECK constraint, as a typed error.
    with pytest.raises(InvalidArgument) as caught, transaction.atomic(), sql_errors(), connection.cursor() as cursor:
        cursor.execute("INSERT INTO lonnymq_subscription (topic, queue) VALUES ('t', %s)", [too_long])
    assert caught.value.field == "queue"
    with pytest.raises(InvalidArgument) as caught, transaction.atomic(), sql_errors(), connection.cursor() as cursor:
        cursor.execute("SELECT lonnymq_subscribe_v1(ARRAY['t']::text[], ARRAY[%s]::text[])", [too_long])
    assert caught.value.field == "queue"
    assert not Subscription.objects.exists()


def test_declared_subscriptions_are_written_once(monkeypatch):
    monkeypatch.setattr(topics, "_declared", {})  # only this test's declarations
    subscribe("invoices.paid", queue="ledger")
    subscribe("invoices.paid", queue="emails")
    try:
        assert sync_subscriptions() == 2
        assert sync_subscriptions() == 0
        assert set(Subscription.objects.values_list("topic", "queue")) == {
            ("invoices.paid", "ledger"),
            ("invoices.paid", "emails"),
        }
        assert len(publish("invoices.paid", {"invoice": 1})) == 2
    finally:
        unsubscribe_declared("invoices.paid", "ledger")
        unsubscribe_declared("invoices.paid", "emails")
