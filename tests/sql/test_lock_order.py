"""A producer that wakes parked channels holds no channel row, so nothing the workers do on
those channels (releasing leases, giving slots back, dequeuing) waits for its commit, and
there is no lock order between producers and workers to get wrong."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness.helpers import configure, dequeue, enqueue_sql, release, rows

pytestmark = pytest.mark.django_db(transaction=True)


def _park_two_channels(conn: Any) -> list[dict[str, Any]]:
    configure("order", "c1", conn=conn)  # created first: the lower id
    configure("order", "c2", max_concurrency=5, conn=conn)
    enqueue_sql("order", channel="c1", conn=conn)
    enqueue_sql("order", channel="c2", conn=conn)
    leased = dequeue("order", batch=2, conn=conn)
    assert len(leased) == 2
    # Both channels are now parked (no ready message): a new enqueue must wake them.
    assert dequeue("order", batch=2, conn=conn) == []
    return leased


def test_release_does_not_wait_for_a_producer_waking_the_channels(connect: Any) -> None:
    setup, producer, releaser = connect(), connect(autocommit=False), connect()
    leased = _park_two_channels(setup)
    # Any wait for the producer's locks would fail the release within 2 s.
    releaser.execute("SET lock_timeout = '2s'")

    enqueue_sql("order", channel="c2", conn=producer)  # wakes c2, then c1: against id order
    enqueue_sql("order", channel="c1", conn=producer)
    assert rows("SELECT 1 FROM lonnymq_channel WHERE queue = 'order' FOR NO KEY UPDATE NOWAIT", conn=setup)

    released = release(leased, conn=releaser)
    assert sorted(released) == sorted(r["id"] for r in leased)
    # Released messages come back at once; the producer's two only after its commit.
    assert len(dequeue("order", batch=10, conn=setup)) == 2
    producer.commit()
    assert len(dequeue("order", batch=10, conn=setup)) == 2
    assert rows("SELECT * FROM lonnymq_check_v2(0)", conn=setup) == []
