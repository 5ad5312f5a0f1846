"""Dedup modes: ``on_duplicate`` "skip" (the key's message stands), "replace" (debounce: the
waiting message takes the newer payload and run time) and "update" (throttle: the newer
payload, the run time kept). A running message is never touched: a newer enqueue then makes
one new waiting message, and later ones change that one. Run times are read from the
database (``dequeue_at``), never from the wall clock.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.db import transaction

from django_lonnymq import Event, Item, api, enqueue, enqueue_many, publish, publish_many
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.models import Subscription
from tests.harness.helpers import (
    ack,
    assert_healthy,
    counts,
    db_now_ms,
    dequeue,
    enqueue_sql,
    fail,
    message_row,
    messages_of,
    rows,
    scalar,
)

pytestmark = pytest.mark.django_db


def waiting(queue: str) -> list[dict]:
    return [m for m in messages_of(queue) if m["lease_until"] is None]


def key_row(queue: str, key: str, channel: str = "default") -> dict:
    [row] = rows(
        "SELECT d.* FROM lonnymq_dedup d JOIN lonnymq_channel c ON c.id = d.channel_id"
        " WHERE c.queue = %s AND c.name = %s AND d.dedup_key = %s",
        [queue, channel, key],
    )
    return row


# ---------------------------------------------------------------------------------------
# skip: today's behaviour, unchanged
# ---------------------------------------------------------------------------------------


def test_skip_is_the_default_and_keeps_the_first_message_even_after_it_ran():
    first = enqueue("dm", {"v": 1}, dedup_key="k", delay=60)
    assert enqueue("dm", {"v": 2}, dedup_key="k") == first
    assert enqueue("dm", {"v": 3}, dedup_key="k", on_duplicate="skip") == first
    assert [m["payload"] for m in messages_of("dm")] == [{"v": 1}]
    api.run_now([first])
    ack(dequeue("dm"))
    # The key outlives its message for the window: a skip enqueue still writes nothing.
    assert enqueue("dm", {"v": 4}, dedup_key="k") == first
    assert messages_of("dm") == []


# ---------------------------------------------------------------------------------------
# replace (debounce) and update (throttle) on a waiting message
# ---------------------------------------------------------------------------------------


def test_replace_gives_the_waiting_message_the_new_payload_and_run_time():
    first = enqueue("dm", {"v": 1}, dedup_key="k", delay=10, max_attempts=3)
    before = message_row(first)
    again = enqueue("dm", {"v": 2}, dedup_key="k", delay=20, on_duplicate="replace", max_attempts=7)
    assert again == first
    after = message_row(first)
    assert after["payload"] == {"v": 2}
    assert after["dequeue_at"] - before["dequeue_at"] >= 10_000  # moved to the newer run time
    assert after["max_attempts"] == 7
    assert after["enqueued_at"] == before["enqueued_at"]
    assert len(messages_of("dm")) == 1
    assert_healthy()


def test_replace_can_move_the_run_time_earlier_and_the_message_is_released_then():
    first = enqueue("dm", {"v": 1}, dedup_key="k", delay=3600)
    assert dequeue("dm") == []
    assert enqueue("dm", {"v": 2}, dedup_key="k", on_duplicate="replace") == first
    [leased] = dequeue("dm")
    assert (leased["id"], leased["payload"]) == (first, {"v": 2})
    assert_healthy()


def test_update_gives_the_new_payload_and_keeps_the_run_time():
    first = enqueue("dm", {"v": 1}, dedup_key="k", delay=30)
    before = message_row(first)
    for n in range(2, 6):
        assert enqueue("dm", {"v": n}, dedup_key="k", delay=n * 100, on_duplicate="update") == first
    after = message_row(first)
    assert after["payload"] == {"v": 5}
    assert after["dequeue_at"] == before["dequeue_at"]
    assert len(messages_of("dm")) == 1


def test_a_message_waiting_for_its_retry_is_replaced_and_keeps_its_attempts():
    first = enqueue("dm", {"v": 1}, dedup_key="k")
    [leased] = dequeue("dm")
    fail(leased, "boom", retry_delay_ms=60_000)
    assert enqueue("dm", {"v": 2}, dedup_key="k", on_duplicate="update") == first
    row = message_row(first)
    assert (row["payload"], row["attempts"], row["lease_until"]) == ({"v": 2}, 1, None)


def test_the_key_is_per_channel_and_a_first_replace_simply_enqueues():
    a = enqueue("dm", "a1", channel="a", dedup_key="k", on_duplicate="replace")
    b = enqueue("dm", "b1", channel="b", dedup_key="k", on_duplicate="replace")
    assert a != b
    assert enqueue("dm", "a2", channel="a", dedup_key="k", on_duplicate="replace") == a
    assert sorted(m["payload"] for m in messages_of("dm")) == ["a2", "b1"]


# ---------------------------------------------------------------------------------------
# A running message is never touched; a finished one is not revived
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["replace", "update"])
def test_a_running_message_gets_one_new_waiting_message_whatever_the_number_of_enqueues(mode):
    first = enqueue("dm", {"v": 0}, dedup_key="k")
    [leased] = dequeue("dm")
    made = {enqueue("dm", {"v": n}, dedup_key="k", delay=5, on_duplicate=mode) for n in range(1, 6)}
    assert len(made) == 1 and first not in made
    [new] = made
    running = message_row(first)
    assert (running["payload"], running["lease_token"]) == ({"v": 0}, leased["lease_token"])
    assert [(m["id"], m["payload"]) for m in waiting("dm")] == [(new, {"v": 5})]
    assert key_row("dm", "k")["message_id"] == new
    ack([leased])
    assert [m["id"] for m in messages_of("dm")] == [new]
    assert_healthy()


def test_update_of_a_running_key_keeps_the_run_time_of_the_new_waiting_message():
    enqueue("dm", {"v": 0}, dedup_key="k")
    dequeue("dm")
    new = enqueue("dm", {"v": 1}, dedup_key="k", delay=30, on_duplicate="update")
    at = message_row(new)["dequeue_at"]
    enqueue("dm", {"v": 2}, dedup_key="k", delay=300, on_duplicate="update")
    assert (message_row(new)["payload"], message_row(new)["dequeue_at"]) == ({"v": 2}, at)


def test_after_the_message_ran_a_replace_makes_a_new_one_and_the_key_names_it():
    first = enqueue("dm", {"v": 1}, dedup_key="k")
    ack(dequeue("dm"))
    created_before = key_row("dm", "k")["created_at"]
    new = enqueue("dm", {"v": 2}, dedup_key="k", on_duplicate="replace")
    assert new != first
    assert [m["payload"] for m in messages_of("dm")] == [{"v": 2}]
    row = key_row("dm", "k")
    assert row["message_id"] == new and row["created_at"] >= created_before
    # ...and a skip enqueue now finds that one.
    assert enqueue("dm", {"v": 3}, dedup_key="k") == new


def test_a_dead_message_is_not_revived_a_new_one_is_made():
    first = enqueue("dm", {"v": 1}, dedup_key="k", max_attempts=1)
    [leased] = dequeue("dm")
    fail(leased, "boom")
    assert message_row(first) is None
    new = enqueue("dm", {"v": 2}, dedup_key="k", on_duplicate="update")
    assert new != first and [m["payload"] for m in messages_of("dm")] == [{"v": 2}]


# ---------------------------------------------------------------------------------------
# enqueue_many: rows of one key behave as that many enqueues in input order
# ---------------------------------------------------------------------------------------


def test_enqueue_many_repeated_keys_with_replace_apply_in_input_order():
    now = db_now_ms()
    got = enqueue_many(
        "dm",
        [
            Item({"v": 1}, dedup_key="a", delay=10),
            Item({"v": 2}, dedup_key="b", delay=10),
            Item("plain"),
            Item({"v": 3}, dedup_key="a", delay=20),
            Item({"v": 4}, dedup_key="a", delay=5),
        ],
        on_duplicate="replace",
    )
    assert got[0] == got[3] == got[4]
    assert len({got[0], got[1], got[2]}) == 3
    a = message_row(got[0])
    assert a["payload"] == {"v": 4} and now + 5_000 <= a["dequeue_at"] < now + 10_000
    assert len(messages_of("dm")) == 3
    # FIFO within the channel follows input order: "a" drew its id before "b" and "plain".
    assert got[0] < got[1] < got[2]
    assert_healthy()


def test_enqueue_many_update_keeps_the_first_run_time_and_the_last_payload():
    got = enqueue_many(
        "dm", [Item({"v": n}, dedup_key="k", delay=10 + n) for n in range(4)], on_duplicate="update"
    )
    assert len(set(got)) == 1
    first_at = message_row(got[0])["dequeue_at"]
    later = enqueue_many("dm", [Item({"v": 9}, dedup_key="k", delay=999)], on_duplicate="update")
    assert later == got[:1]
    assert (message_row(got[0])["payload"], message_row(got[0])["dequeue_at"]) == ({"v": 9}, first_at)


def test_enqueue_many_mixed_modes_of_one_key_in_order():
    existing = enqueue("dm", "old", dedup_key="k")
    got = enqueue_many(
        "dm",
        [
            Item("skipped", dedup_key="k"),
            Item("replaced", dedup_key="k", on_duplicate="replace"),
            Item("skipped too", dedup_key="k", on_duplicate="skip"),
        ],
    )
    assert got == [existing] * 3
    assert [m["payload"] for m in messages_of("dm")] == ["replaced"]


def test_enqueue_many_on_a_running_key_makes_one_waiting_message():
    first = enqueue("dm", "run", dedup_key="k")
    dequeue("dm")
    got = enqueue_many("dm", [Item(f"v{n}", dedup_key="k") for n in range(5)], on_duplicate="replace")
    assert len(set(got)) == 1 and got[0] != first
    assert [(m["id"], m["payload"]) for m in waiting("dm")] == [(got[0], "v4")]


def test_enqueue_many_replace_wakes_the_channel_of_a_message_moved_earlier():
    first = enqueue("dm", "late", dedup_key="k", delay=3600)
    enqueue_many("dm", [Item("now", dedup_key="k"), Item("plain", channel="other")], on_duplicate="replace")
    got = {r["id"]: r["payload"] for r in dequeue("dm", batch=10)}
    assert got.get(first) == "now" and "plain" in got.values()
    assert_healthy()


# ---------------------------------------------------------------------------------------
# publish
# ---------------------------------------------------------------------------------------


def test_publish_replace_in_every_subscribed_queue():
    Subscription.objects.create(topic="doc.edited", queue="index_a")
    Subscription.objects.create(topic="doc.edited", queue="index_b")
    first = publish("doc.edited", {"rev": 1}, key="doc-1", dedup_key="doc-1", on_duplicate="replace")
    again = publish("doc.edited", {"rev": 2}, key="doc-1", dedup_key="doc-1", on_duplicate="replace")
    assert again == first
    [[one, two]] = publish_many(
        "doc.edited", [Event({"rev": 3}, key="doc-1", dedup_key="doc-1")], on_duplicate="update"
    )
    assert [one, two] == first
    for queue in ("index_a", "index_b"):
        assert [m["payload"] for m in messages_of(queue)] == [{"rev": 3}]


# ---------------------------------------------------------------------------------------
# Bad input: typed errors naming field, rule and value; nothing written
# ---------------------------------------------------------------------------------------


@pytest.fixture
def nothing_written():
    enqueue("bad", "existing", dedup_key="k")
    before = counts()
    yield
    assert counts() == before, "a refused call wrote rows"


@pytest.mark.parametrize(
    ("call", "field", "rule", "value"),
    [
        (lambda: enqueue("bad", "x", dedup_key="k", on_duplicate="merge"), "on_duplicate",
         "must be skip, replace or update", "merge"),
        (lambda: enqueue("bad", "x", dedup_key="k", on_duplicate=None), "on_duplicate",
         "must be skip, replace or update", None),
        (lambda: enqueue("bad", "x", on_duplicate="replace"), "on_duplicate", "needs a dedup_key", "replace"),
        (lambda: enqueue_many("bad", ["x"], on_duplicate="REPLACE"), "on_duplicate",
         "must be skip, replace or update", "REPLACE"),
        (lambda: enqueue_many("bad", [Item("a", dedup_key="k"), Item("b", on_duplicate="update")]),
         "items[1].on_duplicate", "needs a dedup_key", "update"),
        (lambda: publish("t", "x", on_duplicate="replace"), "on_duplicate", "needs a dedup_key", "replace"),
        (lambda: publish_many("t", [Event("x", dedup_key="k", on_duplicate="later")]),
         "events[0].on_duplicate", "must be skip, replace or update", "later"),
    ],
)  # fmt: skip
def test_bad_modes_are_refused_naming_field_rule_and_value(nothing_written, call, field, rule, value):
    with pytest.raises(InvalidArgument) as caught:
        call()
    assert (caught.value.field, caught.value.rule, caught.value.value) == (field, rule, value)


@pytest.mark.parametrize(
    ("mode", "key", "rule"),
    [("merge", "k", "must be skip, replace or update"), (None, "k", "must be skip, replace or update"),
     ("update", None, "needs a dedup_key")],
)  # fmt: skip
def test_the_sql_enqueue_refuses_bad_modes_itself(nothing_written, mode, key, rule):
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        enqueue_sql("bad", '"x"', dedup_key=key, on_duplicate=mode)
    assert (
        caught.value.field == "on_duplicate"
        and rule in str(caught.value)
        and str(mode or "NULL") in str(caught.value)
    )


@pytest.mark.parametrize(
    ("mode", "key", "rule"),
    [("merge", "k", "must be skip, replace or update"), ("update", None, "needs a dedup_key")],
)  # fmt: skip
def test_the_sql_batch_functions_refuse_bad_modes_themselves(nothing_written, mode, key, rule):
    """A NULL element is "skip" there; a bad one is named as items[i].on_duplicate."""
    statement = (
        "SELECT lonnymq_enqueue_many_v2('bad', ARRAY['a', 'b'], ARRAY['1', '2']::jsonb[], NULL, NULL, NULL,"
        " %s::text[], %s::text[])"
    )
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        scalar(statement, [["k", key], [None, mode]])
    assert caught.value.field == "items[1].on_duplicate" and rule in str(caught.value)
    Subscription.objects.create(topic="routed", queue="bad")
    for topic in ("routed", "nobody.listens"):
        before = counts()
        with pytest.raises(InvalidArgument) as caught, transaction.atomic():
            scalar(
                "SELECT count(*) FROM lonnymq_publish_v2(%s, NULL, ARRAY['1']::jsonb[], NULL, %s::text[], %s::text[])",
                [topic, [key], [mode]],
            )
        assert caught.value.field == "items[0].on_duplicate" and rule in str(caught.value)
        assert counts() == before
    Subscription.objects.all().delete()


def test_an_item_mode_without_key_and_a_call_default_are_told_apart():
    # The call's mode applies to keyed items only: keyless items are plain enqueues.
    got = enqueue_many(
        "dm", [Item("a", dedup_key="k"), Item("b"), Item("c", dedup_key="k")], on_duplicate="update"
    )
    assert got[0] == got[2] != got[1]
    assert sorted(json.dumps(m["payload"]) for m in messages_of("dm")) == ['"b"', '"c"']


def test_run_at_with_replace_is_the_newer_enqueues_run_at():
    at = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    first = enqueue("dm", "x", dedup_key="k", delay=10)
    enqueue("dm", "y", dedup_key="k", run_at=at, on_duplicate="replace")
    assert message_row(first)["dequeue_at"] == int(at.timestamp() * 1000)
