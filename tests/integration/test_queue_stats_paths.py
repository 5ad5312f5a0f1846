"""``lonnymq_queue_stats_v2`` counts every queue in one pass over the message table (grouped
by channel) and named queues channel by channel (migration 0037): both give the same
figures, and the right ones."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from django_lonnymq.api import configure_channel, enqueue

FIGURES = "queue, channels, paused_channels, ready, scheduled, in_flight, dead, released_total, paused"


def stats(queues: list[str] | None) -> dict[str, tuple]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {FIGURES} FROM lonnymq_queue_stats_v2(%s::text[])", [queues])
        return {row[0]: row[1:] for row in cursor.fetchall()}


@pytest.mark.django_db
def test_every_queue_at_once_and_each_by_name_agree():
    for n in range(3):
        enqueue("qs-a", {"n": n}, channel="one")
    enqueue("qs-a", {"n": 3}, channel="two")
    enqueue("qs-a", {"n": 4}, channel="two", delay=timedelta(hours=1))
    configure_channel("qs-a", "empty")
    enqueue("qs-b", {"n": 5}, channel="held")
    enqueue("qs-b", {"n": 6}, channel="held", delay=timedelta(hours=1))
    enqueue("qs-b", {"n": 7}, channel="open")
    configure_channel("qs-b", "held", paused=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM lonnymq_dequeue_v1('qs-a', 2, 60000, 'test')")
        assert cursor.fetchone()[0] == 2

    every = stats(None)
    # channels, paused_channels, ready, scheduled, in_flight, dead, released_total, paused
    assert every["qs-a"] == (3, 0, 2, 1, 2, 0, 2, 0)
    assert every["qs-b"] == (2, 1, 1, 0, 0, 0, 0, 2)
    for queue in ("qs-a", "qs-b"):
        assert stats([queue]) == {queue: every[queue]}
    assert stats(["qs-a", "qs-b"]) == {q: every[q] for q in ("qs-a", "qs-b")}


@pytest.mark.django_db
def test_the_oldest_ready_wait_is_read_both_ways():
    enqueue("qs-c", {"n": 1}, channel="one")
    configure_channel("qs-c", "quiet")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT oldest_ready_ms FROM lonnymq_queue_stats_v2(NULL::text[]) WHERE queue = 'qs-c'),"
            " (SELECT oldest_ready_ms FROM lonnymq_queue_stats_v2(ARRAY['qs-c']))"
        )
        every, named = cursor.fetchone()
    assert every is not None and named is not None
    assert 0 <= every < 60_000 and 0 <= named < 60_000
