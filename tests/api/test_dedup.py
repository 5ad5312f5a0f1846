"""Dedup keys: a repeated key in the same channel returns the existing message's id."""

from __future__ import annotations

import pytest

from django_lonnymq import Item, enqueue, enqueue_many
from tests.harness.helpers import ack, assert_healthy, counts, dequeue, messages_of, rows

pytestmark = pytest.mark.django_db


def test_same_key_same_channel_returns_the_same_id_and_stores_one_message():
    first = enqueue("dd", {"v": 1}, channel="c", dedup_key="order-1")
    again = enqueue("dd", {"v": 2}, channel="c", dedup_key="order-1")
    assert again == first
    stored = messages_of("dd")
    assert [(m["id"], m["payload"], m["dedup_key"]) for m in stored] == [(first, {"v": 1}, "order-1")]
    assert_healthy()


def test_same_key_in_another_channel_or_queue_is_another_message():
    a = enqueue("dd", "x", channel="a", dedup_key="k")
    b = enqueue("dd", "x", channel="b", dedup_key="k")
    other_queue = enqueue("dd2", "x", channel="a", dedup_key="k")
    assert len({a, b, other_queue}) == 3
    assert len(messages_of("dd")) == 2 and len(messages_of("dd2")) == 1


def test_different_keys_and_no_key_are_not_deduplicated():
    ids = [
        enqueue("dd", "x", dedup_key="k1"),
        enqueue("dd", "x", dedup_key="k2"),
        enqueue("dd", "x"),
        enqueue("dd", "x"),
    ]
    assert len(set(ids)) == 4


def test_enqueue_many_dedups_against_existing_messages():
    existing = enqueue("dd", "old", channel="c", dedup_key="k1")
    got = enqueue_many(
        "dd",
        [
            Item("new", channel="c", dedup_key="k1"),
            Item("fresh", channel="c", dedup_key="k2"),
            Item("nokey", channel="c"),
        ],
    )
    assert got[0] == existing
    assert len(set(got)) == 3
    assert sorted(m["payload"] for m in messages_of("dd")) == ["fresh", "nokey", "old"]


def test_enqueue_many_dedups_within_one_batch_the_first_item_wins():
    got = enqueue_many(
        "dd",
        [
            Item("first", channel="c", dedup_key="k"),
            Item("other channel", channel="d", dedup_key="k"),
            Item("second", channel="c", dedup_key="k"),
            Item("third", channel="c", dedup_key="k"),
        ],
    )
    assert got[0] == got[2] == got[3]
    assert got[1] != got[0]
    stored = {m["id"]: m for m in messages_of("dd")}
    assert len(stored) == 2
    assert stored[got[0]]["payload"] == "first"
    # The returned ids exist and are delivered once each.
    assert sorted(r["id"] for r in dequeue("dd", batch=10)) == sorted({got[0], got[1]})


def test_enqueue_many_retried_with_the_same_keys_creates_nothing_new():
    items = [Item({"row": n}, channel=f"t{n % 3}", dedup_key=f"row-{n}") for n in range(30)]
    first = enqueue_many("dd", items)
    before = counts()
    second = enqueue_many("dd", items)
    assert second == first
    assert counts() == before


def test_a_dedup_key_outlives_its_acked_message():
    first = enqueue("dd", "x", dedup_key="once")
    ack(dequeue("dd"))
    assert messages_of("dd") == []
    again = enqueue("dd", "x", dedup_key="once")
    assert again == first
    assert messages_of("dd") == []  # nothing new to deliver
    assert rows("SELECT message_id FROM lonnymq_dedup WHERE dedup_key = 'once'") == [{"message_id": first}]
