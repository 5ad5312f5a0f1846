"""Bad input gets a clear error that names the field, and writes nothing."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import override_settings
from django.utils import timezone

from django_lonnymq import Item, api, enqueue, enqueue_many
from django_lonnymq.exceptions import (
    InvalidArgument,
    LonnyMQError,
    PayloadError,
    PriorityWithSchedule,
    UnsupportedIsolation,
    translate,
)
from django_lonnymq.models import Channel
from tests.harness.helpers import ack, configure, counts, dequeue, enqueue_sql, extend, fail, named

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("statement_binding")]


@pytest.fixture
def nothing_written():
    """Asserts the queue's tables hold the same rows after the test as before its body."""
    enqueue("bad", "existing", channel="existing")
    before = counts()
    yield
    assert counts() == before, "a refused call wrote rows"


# ---------------------------------------------------------------------------------------
# Payload
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload", [object(), {"when": dt.date(2024, 1, 1)}, {1, 2}, Decimal("1.5"), b"bytes", {("a",): 1}]
)
def test_non_json_serializable_payload_is_refused(nothing_written, payload):
    with pytest.raises(PayloadError) as caught:
        enqueue("bad", payload)
    assert caught.value.field == "payload"
    assert "JSON-serializable" in str(caught.value)
    assert isinstance(caught.value, InvalidArgument) and isinstance(caught.value, LonnyMQError)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinite_payloads_are_refused(nothing_written, value):
    with pytest.raises(PayloadError) as caught:
        enqueue("bad", {"score": value})
    assert caught.value.field == "payload"


def test_nul_character_in_payload_is_refused(nothing_written):
    with pytest.raises(PayloadError, match="NUL"):
        enqueue("bad", {"text": "a\x00b"})


def test_oversized_payload_is_refused(nothing_written):
    with override_settings(LONNYMQ_MAX_PAYLOAD_BYTES=100):
        assert enqueue("bad", "x" * 50, channel="existing")  # under the limit: fine
        with pytest.raises(PayloadError) as caught:
            enqueue("bad", "x" * 200)
    assert caught.value.field == "payload"
    assert "LONNYMQ_MAX_PAYLOAD_BYTES=100" in str(caught.value)
    assert "202 bytes" in str(caught.value)
    # The accepted one is the only write; undo it for the fixture's count.
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM lonnymq_message WHERE payload = to_jsonb(repeat('x', 50))")
        assert cursor.rowcount == 1


def test_oversized_payload_in_enqueue_many_names_the_item(nothing_written):
    with override_settings(LONNYMQ_MAX_PAYLOAD_BYTES=100), pytest.raises(PayloadError) as caught:
        enqueue_many("bad", ["small", "y" * 500])
    assert caught.value.field == "items[1].payload"


# ---------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"queue": ""}, "queue"),
        ({"queue": "q" * 101}, "queue"),
        ({"queue": None}, "queue"),
        ({"queue": 5}, "queue"),
        ({"channel": ""}, "channel"),
        ({"channel": "c" * 201}, "channel"),
        ({"channel": None}, "channel"),
        ({"dedup_key": ""}, "dedup_key"),
        ({"dedup_key": "k" * 201}, "dedup_key"),
        ({"dedup_key": "lonnymq.step:1"}, "dedup_key"),  # the queue's own keys
        ({"dedup_key": "lonnymq.periodic:7:1700000000000"}, "dedup_key"),
    ],
)
def test_bad_names_are_refused_naming_the_field(nothing_written, kwargs, field):
    args = {"queue": "bad", "channel": "c", **kwargs}
    queue = args.pop("queue")
    with pytest.raises(InvalidArgument) as caught:
        enqueue(queue, "x", **args)
    assert caught.value.field == field
    assert str(caught.value).startswith(field)


def test_longest_allowed_names_are_accepted():
    message_id = enqueue("q" * 100, "x", channel="c" * 200, dedup_key="k" * 200)
    assert Channel.objects.get(queue="q" * 100, name="c" * 200).messages.get().id == message_id


def test_bad_names_in_configure_channel(nothing_written):
    with pytest.raises(InvalidArgument) as caught:
        api.configure_channel("", "c", max_concurrency=1)
    assert caught.value.field == "queue"
    with pytest.raises(InvalidArgument) as caught:
        api.configure_channel("bad", "c" * 201, max_concurrency=1)
    assert caught.value.field == "channel"


# ---------------------------------------------------------------------------------------
# Limits: Python validation and the schema's CHECK constraints
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_concurrency": -1}, "max_concurrency"),
        ({"max_concurrency": "2"}, "max_concurrency"),
        ({"max_concurrency": True}, "max_concurrency"),
        ({"max_concurrency": 2.0}, "max_concurrency"),
        ({"release_interval": -1}, "release_interval"),
        ({"release_interval": dt.timedelta(seconds=-1)}, "release_interval"),
        ({"release_interval": float("nan")}, "release_interval"),
        ({"release_interval": "1s"}, "release_interval"),
        ({"paused": "yes"}, "paused"),
    ],
)
def test_bad_limits_in_configure_channel(nothing_written, kwargs, field):
    with pytest.raises(InvalidArgument) as caught:
        api.configure_channel("bad", "existing", **kwargs)
    assert caught.value.field == field
    channel = Channel.objects.get(queue="bad", name="existing")
    assert (channel.max_concurrency, channel.release_interval_ms, channel.paused) == (None, 0, False)


@pytest.mark.parametrize(
    ("column", "value", "constraint"),
    [
        ("max_concurrency", 0, "lonnymq_channel_max_concurrency_positive"),
        ("max_concurrency", -3, "lonnymq_channel_max_concurrency_positive"),
        ("release_interval_ms", -1, "lonnymq_channel_release_interval_range"),
        ("release_interval_ms", 31_622_400_001, "lonnymq_channel_release_interval_range"),
        ("in_flight", -1, "lonnymq_channel_in_flight_nonnegative"),
    ],
)
def test_the_schema_refuses_bad_limits_written_directly(nothing_written, column, value, constraint):
    with pytest.raises(IntegrityError) as caught, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE lonnymq_channel SET {column} = %s WHERE queue = 'bad' AND name = 'existing'", [value]
        )
    assert constraint in str(caught.value)
    assert caught.value.__cause__.diag.constraint_name == constraint
    typed = translate(caught.value)
    assert isinstance(typed, InvalidArgument) and typed.field == column
    # The ORM (and so the admin) hits the same constraint.
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        Channel.objects.filter(queue="bad", name="existing").update(**{column: value})


def test_sql_configure_channel_refuses_bad_limits_with_lq001(nothing_written):
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        configure("bad", "existing", max_concurrency=0)
    assert caught.value.field == "max_concurrency"
    assert caught.value.__cause__.__cause__.sqlstate == "LQ001"
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        configure("bad", "existing", release_interval_ms=-5)
    assert caught.value.field == "release_interval_ms"


# ---------------------------------------------------------------------------------------
# Times, priorities, types
# ---------------------------------------------------------------------------------------


def test_naive_datetime_is_refused_under_use_tz(nothing_written):
    naive = dt.datetime.now() + dt.timedelta(minutes=5)
    with pytest.raises(InvalidArgument) as caught:
        enqueue("bad", "x", run_at=naive)
    assert caught.value.field == "run_at"
    assert "timezone-aware" in str(caught.value)
    with pytest.raises(InvalidArgument) as caught:
        enqueue_many("bad", [Item("x", run_at=naive)])
    assert caught.value.field == "run_at"


@override_settings(USE_TZ=False)
def test_naive_datetime_is_taken_in_the_default_time_zone_without_use_tz():
    naive = dt.datetime(2030, 1, 1, 12, 0, 0)
    message_id = enqueue("bad", "x", run_at=naive)
    expected = int(timezone.make_aware(naive, timezone.get_default_timezone()).timestamp() * 1000)
    with connection.cursor() as cursor:
        cursor.execute("SELECT dequeue_at FROM lonnymq_message WHERE id = %s", [message_id])
        assert cursor.fetchone()[0] == expected


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"run_at": "2030-01-01"}, "run_at"),
        ({"run_at": dt.date(2030, 1, 1)}, "run_at"),
        ({"delay": -1}, "delay"),
        ({"delay": "5"}, "delay"),
        ({"delay": True}, "delay"),
        ({"delay": float("inf")}, "delay"),
        ({"run_at": timezone.now(), "delay": 1}, "run_at"),
    ],
)
def test_bad_schedule_is_refused(nothing_written, kwargs, field):
    with pytest.raises(InvalidArgument) as caught:
        enqueue("bad", "x", **kwargs)
    assert caught.value.field == field


@pytest.mark.parametrize("priority", [-1, 101, "high", 1.5, None, True])
def test_priority_out_of_range_or_not_an_integer_is_refused(nothing_written, priority):
    with pytest.raises(InvalidArgument) as caught:
        enqueue("bad", "x", priority=priority)
    assert caught.value.field == "priority"
    assert not isinstance(caught.value, PriorityWithSchedule)
    with pytest.raises(InvalidArgument) as caught:
        enqueue_many("bad", ["ok"], priority=priority)
    assert caught.value.field == "items[0].priority"
    if priority is not None:  # an Item's None means "the call's default"
        with pytest.raises(InvalidArgument) as caught:
            enqueue_many("bad", [Item("x", priority=priority)])
        assert caught.value.field == "items[0].priority"


@pytest.mark.parametrize("max_attempts", ["3", 0, 1001, -1, 2.0, True, False])
def test_bad_max_attempts_is_refused(nothing_written, max_attempts):
    with pytest.raises(InvalidArgument) as caught:
        enqueue("bad", "x", max_attempts=max_attempts)
    assert caught.value.field == "max_attempts"
    with pytest.raises(InvalidArgument) as caught:
        enqueue_many("bad", ["ok", Item("x", max_attempts=max_attempts)])
    assert caught.value.field == "items[1].max_attempts"


def test_bad_ids_in_operations_are_refused(nothing_written):
    for call in (api.cancel, api.run_now, api.requeue_dead):
        with pytest.raises(InvalidArgument) as caught:
            call([1, "2"])
        assert caught.value.field == "ids"
    with pytest.raises(InvalidArgument):
        api.cancel([True])


# ---------------------------------------------------------------------------------------
# enqueue_many is all or nothing
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (Item(object()), "items[2].payload"),
        (Item("x", channel=""), "items[2].channel"),
        (Item("x", dedup_key="k" * 201), "items[2].dedup_key"),
        (Item("x", dedup_key="lonnymq.step:1"), "items[2].dedup_key"),
        (Item("x", priority=101), "items[2].priority"),
        (Item("x", run_at=dt.datetime(2030, 1, 1)), "run_at"),
        (Item("x", dedup_key="k", on_duplicate="merge"), "items[2].on_duplicate"),
        (Item("x", on_duplicate="replace"), "items[2].on_duplicate"),
    ],
)
def test_enqueue_many_with_one_bad_item_writes_nothing(nothing_written, bad, field):
    items = [Item("a", channel="new-1", dedup_key="d1"), Item("b", channel="new-2"), bad, Item("c")]
    with pytest.raises(InvalidArgument) as caught:
        enqueue_many("bad", items)
    assert caught.value.field == field
    assert not Channel.objects.filter(name__in=["new-1", "new-2"]).exists()


def test_enqueue_many_with_one_bad_item_caught_by_sql_writes_nothing(nothing_written):
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        named(
            "enqueue_many",
            queue="bad",
            channels=["new-1", "new-2", "new-3"],
            payloads=['"a"', '"b"', '"c"'],
            run_at_ms=None,
            delay_ms=None,
            priorities=None,
            dedup_keys=["k1", None, None],
            on_duplicate=None,
            max_attempts=[5, 5, 0],
            default_max_attempts=5,
            priority_step_ms=1000,
            tolerance_ms=50,
            costs=None,
            slots=None,
        )
    assert caught.value.field == "items[2].max_attempts"
    assert caught.value.__cause__.__cause__.sqlstate == "LQ001"


# ---------------------------------------------------------------------------------------
# SQL-level invalid arguments: SQLSTATE LQ001 -> InvalidArgument naming the field
# ---------------------------------------------------------------------------------------


def _sql_enqueue_many(**overrides):
    params = {
        "queue": "bad",
        "channels": ["c"],
        "payloads": ['"x"'],
        "run_at_ms": None,
        "delay_ms": None,
        "priorities": None,
        "dedup_keys": None,
        "on_duplicate": None,
        "max_attempts": None,
        "default_max_attempts": 5,
        "priority_step_ms": 1000,
        "tolerance_ms": 50,
        "costs": None,
        "slots": None,
    }
    return named("enqueue_many", **{**params, **overrides})


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: enqueue_sql("", channel="c"), "queue"),
        (lambda: enqueue_sql("q" * 101, channel="c"), "queue"),
        (lambda: enqueue_sql("bad", channel=""), "channel"),
        (lambda: enqueue_sql("bad", channel="c" * 201), "channel"),
        (lambda: enqueue_sql("bad", priority=-1), "priority"),
        (lambda: enqueue_sql("bad", priority=101), "priority"),
        (lambda: enqueue_sql("bad", max_attempts=0), "max_attempts"),
        (lambda: enqueue_sql("bad", max_attempts=1001), "max_attempts"),
        (lambda: enqueue_sql("bad", delay_ms=-1), "delay"),
        (lambda: enqueue_sql("bad", delay_ms=1, run_at_ms=1), "run_at"),
        (lambda: enqueue_sql("bad", dedup_key=""), "dedup_key"),
        (lambda: enqueue_sql("bad", payload=None), "payload"),
        (lambda: _sql_enqueue_many(queue=""), "queue"),
        (lambda: _sql_enqueue_many(channels=["c", "d"]), "items"),
        (lambda: _sql_enqueue_many(channels=[""]), "items[0].channel"),
        (lambda: _sql_enqueue_many(priorities=[200]), "priority"),
        (lambda: dequeue("bad", batch=0), "batch_size"),
        (lambda: dequeue("bad", batch=10_001), "batch_size"),
        (lambda: dequeue("bad", lease_ms=0), "lease"),
        (lambda: extend([{"id": 1, "lease_token": None}], 0), "lease"),
        (lambda: named("ack", ids=[1, 2], tokens=[None]), "tokens"),
        (lambda: named("extend", ids=[1], tokens=[], lease_ms=10), "tokens"),
        (lambda: fail({"id": 1, "lease_token": None}, retry_delay_ms=-1), "retry_delay"),
    ],
)
def test_sql_functions_refuse_bad_arguments_with_lq001(nothing_written, call, field):
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        call()
    assert caught.value.field == field, str(caught.value)
    assert caught.value.__cause__.__cause__.sqlstate == "LQ001"
    assert field.split("[")[0] in str(caught.value)


@pytest.mark.django_db(transaction=True)
def test_dequeue_refuses_a_stricter_isolation_level(connect):
    import psycopg

    enqueue("bad", "x")
    conn = connect(autocommit=False)
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    with pytest.raises(UnsupportedIsolation, match="READ COMMITTED") as caught:
        dequeue("bad", conn=conn)
    assert caught.value.__cause__.sqlstate == "LQ006"
    conn.rollback()
    assert len(dequeue("bad")) == 1  # nothing was leased


def test_translate_leaves_unrelated_errors_alone():
    with pytest.raises(Exception) as caught, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT 1/0")
    assert translate(caught.value) is None


def test_ack_of_nothing_is_fine(nothing_written):
    assert ack([]) == []


# ---------------------------------------------------------------------------------------
# An outside review's inputs: each refused with InvalidArgument naming the field, nothing sent
# ---------------------------------------------------------------------------------------


def _deep(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("call", "field", "rule"),
    [
        (lambda: enqueue("bad\x00q", {}), "queue", "NUL"),
        (lambda: enqueue("bad", {}, channel="c\x00"), "channel", "NUL"),
        (lambda: enqueue("bad", {}, dedup_key="k\x00"), "dedup_key", "NUL"),
        (lambda: enqueue("bad\ud800", {}), "queue", "lone surrogate"),
        (lambda: enqueue("bad", {}, channel="\udc00x"), "channel", "lone surrogate"),
        (lambda: enqueue("bad", {"text": "a\ud800b"}), "payload", "lone surrogate"),
        (lambda: enqueue("bad", {"key\udfff": 1}), "payload", "lone surrogate"),
        (lambda: enqueue("bad", _deep(100_000)), "payload", "nested"),
        (lambda: enqueue("   ", {}), "queue", "blanks"),
        (lambda: enqueue("bad", {}, channel=" \t"), "channel", "blanks"),
        (lambda: enqueue("bad", {}, delay=float("nan")), "delay", "finite"),
        (lambda: enqueue("bad", {}, delay=1e30), "delay", "at most 100 years"),
        (lambda: enqueue("bad", {}, delay=dt.timedelta(days=3_000_000)), "delay", "at most 100 years"),
        (lambda: enqueue("bad", {}, run_at=timezone.now() + dt.timedelta(days=40_000)), "run_at", "100 years"),
        (lambda: enqueue("bad", {}, run_at=dt.datetime(1900, 1, 1, tzinfo=dt.UTC)), "run_at", "1970"),
        (lambda: enqueue("bad", {}, using="nope"), "using", "DATABASES"),
        (lambda: enqueue("bad", {}, using=""), "using", "DATABASES"),
        (lambda: enqueue_many("bad", "abc"), "items", "list, tuple or iterator"),
        (lambda: enqueue_many("bad", {"a": 1, "b": 2}), "items", "list, tuple or iterator"),
        (lambda: enqueue_many("bad", {1, 2}), "items", "list, tuple or iterator"),
        (lambda: enqueue_many("bad", 7), "items", "list, tuple or iterator"),
        (lambda: enqueue_many("bad", [{}], using="nope"), "using", "DATABASES"),
        (lambda: api.configure_channel("bad", "existing", release_interval=float("inf")), "release_interval", "finite"),
        (lambda: api.configure_channel("bad", "existing", release_interval=9_223_371_000_000), "release_interval", "366 days"),
        (lambda: api.check(grace=float("nan")), "grace", "finite"),
        (lambda: api.check(grace=1e12), "grace", "1 day"),
        (lambda: api.requeue_dead([2**63]), "ids", "between 1 and"),
        (lambda: api.run_now([2**70]), "ids", "between 1 and"),
        (lambda: api.cancel([-1]), "ids", "between 1 and"),
        (lambda: api.purge_channel(2**63), "channel_id", "between 1 and"),
        (lambda: api.cancel(None), "ids", "list, tuple or iterator"),
        (lambda: api.run_now(5), "ids", "list, tuple or iterator"),
        (lambda: api.requeue_dead("12"), "ids", "list, tuple or iterator"),
        (lambda: api.cancel([1], using="nope"), "using", "DATABASES"),
    ],
)  # fmt: skip
def test_review_input_is_refused_naming_the_field_and_rule(nothing_written, call, field, rule):
    with pytest.raises(InvalidArgument) as caught:
        call()
    assert caught.value.field == field, caught.value
    assert rule in str(caught.value), caught.value


def test_a_far_future_delay_that_is_accepted_still_shows_in_the_admin(client, admin_user):
    # The largest accepted delay keeps the release time a date Python can show (the admin
    # answered 500 "year out of range" for 3,000,000 days before it was refused).
    message_id = enqueue("bad", {}, channel="far", delay=dt.timedelta(days=36_525))
    client.force_login(admin_user)
    response = client.get("/admin/django_lonnymq/message/")
    assert response.status_code == 200
    api.cancel([message_id])
