"""Enqueue and enqueue_many through the Python API, against the real SQL functions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_lonnymq import Item, api, enqueue, enqueue_many
from django_lonnymq.conf import settings as lonnymq_settings
from tests.harness.helpers import (
    assert_healthy,
    channel_row,
    db_now_ms,
    dequeue,
    message_row,
    messages_of,
    rows,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("statement_binding")]


def test_enqueue_stores_the_message_ready_now_in_a_new_default_channel():
    before = db_now_ms()
    message_id = enqueue("enq", {"video": 7, "tags": ["a", "b"]})
    after = db_now_ms()

    row = message_row(message_id)
    assert row is not None
    assert row["payload"] == {"video": 7, "tags": ["a", "b"]}
    assert before <= row["dequeue_at"] <= after
    assert row["attempts"] == 0
    assert row["max_attempts"] == lonnymq_settings.MAX_ATTEMPTS
    assert row["lease_until"] is None and row["lease_token"] is None
    channel = channel_row("enq", "default")
    assert channel is not None and row["channel_id"] == channel["id"]
    # A new channel gets the default limits and a wake-up mark for its first message (the
    # producer locks no channel row; the next dequeue applies the mark).
    assert channel["max_concurrency"] is None
    assert channel["release_interval_ms"] == 0
    assert channel["paused"] is False
    assert channel["next_dequeue_at"] is None
    marks = rows("SELECT queue, channel_id, dequeue_at FROM lonnymq_wake")
    assert marks == [{"queue": "enq", "channel_id": channel["id"], "dequeue_at": row["dequeue_at"]}]
    assert_healthy()


def test_enqueue_into_a_named_channel_with_max_attempts():
    message_id = enqueue("enq", [1, 2, 3], channel="tenant-42", max_attempts=9)
    row = message_row(message_id)
    assert row["max_attempts"] == 9
    assert row["channel_id"] == channel_row("enq", "tenant-42")["id"]
    assert channel_row("enq", "default") is None


def test_enqueue_returns_increasing_ids_and_the_message_is_delivered_with_its_payload():
    first = enqueue("enq", {"n": 1})
    second = enqueue("enq", {"n": 2})
    assert second > first
    got = dequeue("enq", batch=10)
    assert [(r["id"], r["payload"]) for r in got] == [(first, {"n": 1}), (second, {"n": 2})]
    assert all(r["channel"] == "default" and r["attempts"] == 1 for r in got)


@pytest.mark.parametrize("payload", [None, 0, "text", [], {"nested": {"deep": [1, None, True]}}, "ünïcødé ✓"])
def test_any_json_payload_round_trips(payload):
    message_id = enqueue("enq", payload)
    assert message_row(message_id)["payload"] == payload
    assert dequeue("enq")[0]["payload"] == payload


def test_enqueue_many_returns_ids_in_input_order_across_channels():
    items = [
        Item({"i": 0}, channel="b"),
        Item({"i": 1}, channel="a"),
        {"i": 2},  # a bare payload takes the call's defaults
        Item({"i": 3}, channel="b", max_attempts=2),
        Item({"i": 4}, channel="c"),
    ]
    got = enqueue_many("many", items, channel="z", max_attempts=7)
    assert len(got) == 5 and len(set(got)) == 5
    by_id = {row["id"]: row for row in messages_of("many")}
    assert [by_id[i]["payload"] for i in got] == [{"i": n} for n in range(5)]
    assert [by_id[i]["channel_name"] for i in got] == ["b", "a", "z", "b", "c"]
    assert [by_id[i]["max_attempts"] for i in got] == [7, 7, 7, 2, 7]
    assert_healthy()


def test_enqueue_many_of_nothing_writes_nothing():
    assert enqueue_many("many", []) == []
    assert messages_of("many") == []


def test_enqueue_many_item_schedule_and_priority():
    now = db_now_ms()
    run_at = timezone.now() + timedelta(hours=1)
    got = enqueue_many(
        "many",
        [Item("later", run_at=run_at), Item("soon", delay=60), Item("urgent", priority=3), "plain"],
    )
    rows = {r["id"]: r for r in messages_of("many")}
    later, soon, urgent, plain = (rows[i] for i in got)
    assert abs(later["dequeue_at"] - int(run_at.timestamp() * 1000)) <= 1
    assert now + 60_000 <= soon["dequeue_at"] <= db_now_ms() + 60_000
    assert urgent["priority"] == 3
    assert urgent["dequeue_at"] == plain["dequeue_at"] - 3 * 1000  # one LONNYMQ_PRIORITY_STEP each
    # Only the ready ones come out, the urgent one first.
    assert [r["payload"] for r in dequeue("many", batch=10)] == ["urgent", "plain"]


def test_enqueue_many_call_defaults_apply_to_every_item():
    got = enqueue_many("many", ["x", "y"], delay=timedelta(minutes=5))
    assert dequeue("many", batch=10) == []
    now = db_now_ms()
    for row in messages_of("many"):
        assert row["id"] in got
        assert now + 4 * 60_000 < row["dequeue_at"] <= now + 5 * 60_000


def test_api_check_is_empty_on_a_fresh_queue_and_after_enqueues():
    assert api.check() == []
    enqueue_many("many", [Item(i, channel=f"c{i % 3}") for i in range(30)])
    assert_healthy()


def test_a_backslash_followed_by_u0000_is_text_not_a_nul_character():
    # The six characters \u0000 (a Windows path, a regex, a JSON snippet) are ordinary text;
    # only a real NUL character is refused (see test_bad_input.py).
    payload = {"path": "C:\\u0000\\file", "pattern": "\\\\u0000"}
    message_id = enqueue("enq", payload)
    assert message_row(message_id)["payload"] == payload


def test_with_prepared_statements_on_enqueue_is_prepared_once_per_connection(statement_binding):
    def prepared_enqueues() -> tuple[int, int]:
        """(prepared enqueue statements, their executions) of this connection."""
        [row] = rows(
            "SELECT count(*) AS statements, coalesce(sum(generic_plans + custom_plans), 0) AS runs"
            " FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%lonnymq_enqueue_v4%"],
        )
        return row["statements"], row["runs"]

    first = enqueue("enq", {"n": 0}, channel="c0", dedup_key="k0")
    statements, runs = prepared_enqueues()
    for n in range(1, 4):
        enqueue("enq", {"n": n}, channel=f"c{n}", dedup_key=f"k{n}")
    assert enqueue("enq", "again", channel="c0", dedup_key="k0") == first
    if statement_binding == "prepared":
        assert statements >= 1
        assert prepared_enqueues() == (statements, runs + 4)  # the same statement, run again
    else:
        assert prepared_enqueues() == (statements, runs)  # nothing prepared ran
