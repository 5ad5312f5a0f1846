"""Fairness: one tenant's big backlog does not delay the others' small ones."""

from __future__ import annotations

import pytest

from django_lonnymq import Item, enqueue_many
from tests.harness.helpers import assert_healthy, dequeue

pytestmark = pytest.mark.django_db

SMALL = [f"small-{n}" for n in range(10)]


@pytest.mark.parametrize("batch", [1, 10, 100])
def test_small_channels_are_not_delayed_by_a_big_backlog(batch):
    big = enqueue_many("rr", [{"n": n} for n in range(2000)], channel="big")
    small = enqueue_many("rr", [Item({"n": n}, channel=name) for name in SMALL for n in range(10)])
    small_ids = set(small)

    # Drain in calls of `batch`; a message's position is its index in the concatenated rows.
    released: list[dict] = []
    while small_ids - {r["id"] for r in released}:
        got = dequeue("rr", batch=batch)
        assert got, f"queue ran dry with small messages left: {small_ids - {r['id'] for r in released}}"
        assert len(got) <= batch
        released += got
        assert len(released) <= 2110

    positions = {r["id"]: pos for pos, r in enumerate(released, start=1)}
    last_small = max(positions[i] for i in small)
    # 11 channels in exact round robin: the 10th round ends at release 110 or 111.
    assert last_small <= 111, (
        f"batch {batch}: last small-channel message released at position {last_small}; "
        f"small positions per channel: "
        + "; ".join(
            f"{name}={[positions[i] for i in small[k * 10 : (k + 1) * 10]]}" for k, name in enumerate(SMALL)
        )
    )
    # Every round gives each channel one release: the big channel got its share too.
    big_out = [positions[i] for i in big if i in positions]
    assert len([p for p in big_out if p <= 110]) >= 9, f"big channel released at {big_out[:20]}"
    # FIFO within each channel survives the interleaving.
    for name in ["big", *SMALL]:
        order = [r["id"] for r in released if r["channel"] == name]
        assert order == sorted(order), f"channel {name} out of order: {order}"
    assert_healthy()


def test_round_robin_alternates_between_two_busy_channels():
    enqueue_many("rr", [Item(n, channel="a") for n in range(5)] + [Item(n, channel="b") for n in range(5)])
    channels = [dequeue("rr")[0]["channel"] for _ in range(10)]
    assert channels == ["a", "b"] * 5


def test_a_channel_that_joins_late_is_served_in_the_next_round():
    enqueue_many("rr", [Item(n, channel=c) for c in "abc" for n in range(20)])
    first = [dequeue("rr")[0]["channel"] for _ in range(6)]
    assert first == ["a", "b", "c", "a", "b", "c"]
    enqueue_many("rr", [Item(0, channel="late")])
    nxt = [dequeue("rr")[0]["channel"] for _ in range(4)]
    assert "late" in nxt, f"late channel not served within one round: {nxt}"
