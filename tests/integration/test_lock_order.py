"""Calls that touch several channels take the channel rows in id order, so a producer that
wakes channels in id order (as enqueue_many does) never deadlocks with them."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from .helpers import configure, dequeue, enqueue_sql, release, rows

pytestmark = pytest.mark.django_db(transaction=True)


def _park_two_channels(conn: Any) -> list[dict[str, Any]]:
    configure("order", "c1", conn=conn)  # created first: the lower id
    configure("order", "c2", max_concurrency=5, conn=conn)
    enqueue_sql("order", channel="c1", conn=conn)
    enqueue_sql("order", channel="c2", conn=conn)
    leased = dequeue("order", batch=2, conn=conn)
    assert len(leased) == 2
    # Both channels are now parked (no ready message): a new enqueue must wake them, which
    # takes their rows until the producer commits.
    assert dequeue("order", batch=2, conn=conn) == []
    return leased


def test_release_waits_in_id_order_behind_a_waking_producer(connect: Any) -> None:
    setup, producer, releaser = connect(), connect(autocommit=False), connect()
    leased = _park_two_channels(setup)
    releaser.execute("SET lock_timeout = '10s'")
    producer.execute("SET lock_timeout = '10s'")

    enqueue_sql("order", channel="c1", conn=producer)  # wakes c1: holds its row
    outcome: dict[str, Any] = {}

    def release_both() -> None:
        try:
            outcome["released"] = release(leased, conn=releaser)
        except Exception as exc:  # recorded, asserted below
            outcome["error"] = exc

    thread = threading.Thread(target=release_both)
    thread.start()
    # Wait until the release is blocked on c1's row lock.
    for _ in range(200):
        waiting = rows(
            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%%lonnymq_release_v1%%'",
            conn=setup,
        )
        if waiting:
            break
        threading.Event().wait(0.02)
    assert waiting, "the release did not block on the producer's channel row"

    # The producer now wakes c2. Had the release taken c2 before c1, this would deadlock.
    enqueue_sql("order", channel="c2", conn=producer)
    producer.commit()
    thread.join(timeout=15)
    assert "error" not in outcome, outcome.get("error")
    assert sorted(outcome["released"]) == sorted(r["id"] for r in leased)
    assert len(dequeue("order", batch=10, conn=setup)) == 4
