"""A payload nests at most ``bounds.MAX_PAYLOAD_DEPTH`` levels: what a worker can decode.

The depth of a payload is the level of its deepest value, the root being level 0 (``[]``
is 0 deep, ``[[]]`` and ``{"a": 1}`` 1). Python (``arguments.payload``, the Spark writer's
``jsontext.deeper_than``) and SQL (``jsonb_path_exists(payload, 'strict $.**{101}')`` in
``lonnymq_enqueue_v1``, ``lonnymq_enqueue_many_v1`` and the schedule table's CHECK) measure
it the same way. One level too deep is refused, naming the field, the rule and the depth;
nothing is written. The bound itself is accepted.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from django.db import connection, transaction

from django_lonnymq import Item, bounds, enqueue, enqueue_many, jsontext, periodic, schedules
from django_lonnymq.exceptions import InvalidArgument, PayloadError
from django_lonnymq.models import Message, Subscription
from django_lonnymq.topics import publish
from tests.harness.helpers import counts, enqueue_sql, named
from tests.testapp import tasks

pytestmark = pytest.mark.django_db

MAX = bounds.MAX_PAYLOAD_DEPTH


def nested(depth: int) -> Any:
    """A payload whose deepest value is at level ``depth``: lists and objects in turn."""
    value: Any = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def nested_text(depth: int) -> str:
    """``json.dumps(nested(depth))``, built as text (the encoder stops near 1,000 levels)."""
    opens = ['{"k":' if level % 2 == 0 else "[" for level in reversed(range(depth))]
    closes = ["}" if level % 2 == 0 else "]" for level in range(depth)]
    return "".join(opens) + '"leaf"' + "".join(closes)


def walk(value: Any) -> int:
    """The depth by the definition, recursively (fine for the small values here)."""
    children = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else []
    return 1 + max(map(walk, children)) if children else 0


def sql_depth(text: str) -> int:
    """The depth as the schema measures it: the deepest level n with a value at $.**{n}."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(max(n), -1) FROM generate_series(0, 300) AS n"
            " WHERE jsonb_path_exists(%s::jsonb, format('strict $.**{%%s}', n)::jsonpath)",
            [text],
        )
        return int(cursor.fetchone()[0])


@pytest.fixture
def subscribed():
    Subscription.objects.create(topic="deep.topic", queue="deep_group")


@pytest.fixture
def nothing_written(subscribed):
    """The queue's tables hold the same rows after the test's refused calls as before."""
    enqueue("deep", "existing", channel="existing")
    before = counts()
    yield
    assert counts() == before, "a refused call wrote rows"


# ---------------------------------------------------------------------------------------
# One definition
# ---------------------------------------------------------------------------------------


EXAMPLES = [
    (1, 0), ("x", 0), (None, 0), ([], 0), ({}, 0), ([1], 1), ([[]], 1), ({"a": []}, 1), ([[1]], 2),
    ([{"a": {}}], 2), ([[[[]]]], 3), ({"a": {"b": [1, [2]]}}, 4), ({'k"[': ["]]]", {}]}, 2),
    (["[[[[", "\\", {"}": "{{{"}], 2), (nested(MAX), MAX), (nested(MAX + 1), MAX + 1),
]  # fmt: skip


@pytest.mark.parametrize(("value", "expected"), EXAMPLES, ids=lambda v: json.dumps(v)[:30])
def test_python_and_sql_measure_the_depth_alike(value, expected):
    text = json.dumps(value)
    assert walk(value) == expected
    assert jsontext.depth(text) == expected
    assert jsontext.depth(json.dumps(value, indent=2, ensure_ascii=False)) == expected
    assert sql_depth(text) == expected


def test_random_payloads_have_one_depth_in_python_and_sql():
    chooser = random.Random(7)

    def draw(level: int) -> Any:
        roll = chooser.random()
        if level > 8 or roll < 0.3:
            return chooser.choice([1, -2.5, True, None, "", 's]\\"{', "é"])
        if roll < 0.65:
            return [draw(level + 1) for _ in range(chooser.randint(0, 3))]
        return {f"k{i}[": draw(level + 1) for i in range(chooser.randint(0, 3))}

    for _ in range(200):
        value = draw(0)
        text = json.dumps(value)
        assert jsontext.depth(text) == walk(value) == sql_depth(text), text


def test_deeper_than_skips_texts_too_short_or_with_too_few_brackets():
    assert nested_text(MAX) == json.dumps(nested(MAX), separators=(",", ":"))
    assert jsontext.deeper_than(nested_text(5_000), MAX) == 5_000
    assert jsontext.deeper_than(json.dumps(nested(MAX)), MAX) is None
    assert jsontext.deeper_than(json.dumps(nested(MAX + 1)), MAX) == MAX + 1
    assert jsontext.deeper_than("[" * 150 + "]" * 150, MAX) == 149
    # Brackets inside strings do not count.
    assert jsontext.deeper_than(json.dumps(["[" * 500, {"k": "{" * 500}]), MAX) is None
    assert jsontext.deeper_than(json.dumps({"items": [{"n": i} for i in range(1000)]}), MAX) is None


# ---------------------------------------------------------------------------------------
# Python: every producer refuses one level too deep and accepts the bound
# ---------------------------------------------------------------------------------------


def _enqueue(payload: Any) -> None:
    enqueue("deep", payload)


def _enqueue_many(payload: Any) -> None:
    enqueue_many("deep", [Item({"fine": 1}), Item(payload)])


def _publish(payload: Any) -> None:
    publish("deep.topic", payload)


def _task(payload: Any) -> None:
    # The task message is {"args": [arg, 1], ...}: the argument sits at level 2.
    tasks.add.enqueue(payload, 1)


def _periodic(payload: Any) -> None:
    try:
        periodic(every=60, queue="deep", name="deep-schedule", payload=payload)(_handler)
    finally:
        schedules.forget("deep-schedule")


def _handler(message: Any) -> None:
    """A stand-in handler for the schedule."""


PRODUCERS = [
    (_enqueue, 0, "payload"),
    (_enqueue_many, 0, "items[1].payload"),
    (_publish, 0, "events[0].payload"),
    (_task, 2, "payload"),
    (_periodic, 0, "payload"),
]


@pytest.mark.parametrize(("produce", "wrapped", "field"), PRODUCERS, ids=lambda v: getattr(v, "__name__", v))
def test_python_refuses_a_payload_one_level_too_deep(nothing_written, produce, wrapped, field):
    with pytest.raises(PayloadError) as caught:
        produce(nested(MAX + 1 - wrapped))
    assert caught.value.field == field
    assert caught.value.value == MAX + 1
    assert f"nested {MAX + 1} levels deep, more than the {MAX} allowed" in str(caught.value)
    assert f"at most {MAX} levels deep" in caught.value.rule


@pytest.mark.parametrize(("produce", "wrapped", "field"), PRODUCERS, ids=lambda v: getattr(v, "__name__", v))
def test_python_accepts_a_payload_at_the_bound(subscribed, produce, wrapped, field):
    produce(nested(MAX - wrapped))
    if produce is not _periodic:
        assert any(walk(m.payload) == MAX for m in Message.objects.all())


def test_a_payload_too_deep_for_the_encoder_is_refused_with_its_depth(nothing_written):
    value: list = []
    for _ in range(50_000):
        value = [value]
    with pytest.raises(PayloadError) as caught:
        enqueue("deep", value)
    assert caught.value.field == "payload" and caught.value.value == 50_000


# ---------------------------------------------------------------------------------------
# SQL: the functions refuse it themselves (called straight, no Python check)
# ---------------------------------------------------------------------------------------


def _sql_enqueue_many(payloads: list[str]) -> Any:
    return named(
        "enqueue_many",
        queue="deep",
        channels=["c"] * len(payloads),
        payloads=payloads,
        run_at_ms=None,
        delay_ms=None,
        priorities=None,
        dedup_keys=None,
        on_duplicate=None,
        max_attempts=None,
        default_max_attempts=5,
        priority_step_ms=1000,
        tolerance_ms=50,
        costs=None,
        slots=None,
    )


def _sql_publish(payloads: list[str]) -> Any:
    return named(
        "publish",
        topic="deep.topic",
        keys=None,
        payloads=payloads,
        run_at_ms=None,
        dedup_keys=None,
        on_duplicate=None,
        default_max_attempts=5,
        priority_step_ms=1000,
        tolerance_ms=50,
        costs=None,
        slots=None,
    )


@pytest.mark.parametrize("depth", [MAX + 1, 150, 5_000])
@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda text: enqueue_sql("deep", text), "payload"),
        (lambda text: _sql_enqueue_many(['"fine"', text]), "items[1].payload"),
        (lambda text: _sql_publish(['"fine"', text]), "items[1].payload"),
    ],
    ids=["enqueue_v1", "enqueue_many_v1", "publish_v1"],
)
def test_sql_refuses_a_payload_too_deep_naming_its_depth(nothing_written, call, field, depth):
    text = nested_text(depth)
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        call(text)
    assert caught.value.field == field, str(caught.value)
    assert caught.value.__cause__.__cause__.sqlstate == "LQ001"
    assert f"must be nested at most {MAX} levels deep" in str(caught.value)
    assert f"got {depth} levels" in str(caught.value)


@pytest.mark.parametrize(
    "call",
    [
        lambda text: enqueue_sql("deep", text),
        lambda text: _sql_enqueue_many([text]),
        lambda text: _sql_publish([text]),
    ],
    ids=["enqueue_v1", "enqueue_many_v1", "publish_v1"],
)
def test_sql_accepts_a_payload_at_the_bound(subscribed, call):
    call(json.dumps(nested(MAX)))
    assert [walk(m.payload) for m in Message.objects.all()] == [MAX]


def test_the_schedule_table_refuses_a_payload_too_deep(nothing_written):
    declared = {"queue": "deep", "channel": "default", "cron": None, "every_ms": 60_000, "timezone": "UTC",
                "payload": nested(MAX + 1), "catch_up": 1, "max_attempts": None}  # fmt: skip
    params = {"queues": ["deep"], "names": ["deep-schedule"], "next_tick_ats": [1]}
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        named("sync_schedules", **params, declared=[json.dumps(declared)])
    assert caught.value.field == "payload"
    assert "lonnymq_schedule_payload_depth" in str(caught.value)
    # The bound itself is a valid schedule.
    with transaction.atomic():
        named("sync_schedules", **params, declared=[json.dumps({**declared, "payload": nested(MAX)})])
        with connection.cursor() as cursor:
            cursor.execute("SELECT payload FROM lonnymq_schedule WHERE name = 'deep-schedule'")
            stored = cursor.fetchone()[0]
            assert walk(json.loads(stored) if isinstance(stored, str) else stored) == MAX
        transaction.set_rollback(True)
