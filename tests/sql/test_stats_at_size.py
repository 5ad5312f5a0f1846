"""``lonnymq_queue_stats_v3``: every queue's figures, exact up to a cap (``LONNYMQ_STATS_COUNT_CAP``)
and estimated past it, with an ``estimated`` flag, in work that does not grow with the backlog
(docs/admin.md, "Figures at size"). ``lonnymq_queue_stats_v2`` (still installed for the previous
release) counts everything exactly: it is the reference the exact figures are checked against.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from django_lonnymq import api
from django_lonnymq.api import Item
from django_lonnymq.models import QueueSample
from tests.harness.helpers import dequeue, fail, rows, scalar

pytestmark = pytest.mark.django_db

QUEUE = "t_size"
SMALL = "t_size_small"
EXACT = ("channels", "paused_channels", "ready", "scheduled", "in_flight", "dead", "released_total", "paused")
BIG_CHANNELS = 40
PER_CHANNEL = 750  # 30,000 messages: a few hundred pages of the message table


def v2(queues: list[str]) -> dict[str, dict[str, Any]]:
    found = rows("SELECT * FROM lonnymq_queue_stats_v2(%s::text[])", [queues])
    return {row["queue"]: row for row in found}


def v3(queues: list[str] | None, cap: int) -> dict[str, dict[str, Any]]:
    found = rows("SELECT * FROM lonnymq_queue_stats_v3(%s::text[], %s::bigint)", [queues, cap])
    return {row["queue"]: row for row in found}


def assert_same(exact: dict[str, Any], figures: dict[str, Any]) -> None:
    assert {k: figures[k] for k in EXACT} == {k: exact[k] for k in EXACT}
    if exact["oldest_ready_ms"] is None:
        assert figures["oldest_ready_ms"] is None
    else:  # the two calls read the clock apart
        assert abs(figures["oldest_ready_ms"] - exact["oldest_ready_ms"]) < 5_000


@pytest.fixture
def small_queue() -> None:
    """SMALL: 9 ready over 3 channels, 2 scheduled, 1 in flight, 2 waiting in a paused
    channel, 1 dead letter."""
    api.enqueue_many(SMALL, [Item({"n": n}, channel=f"c{n % 3}") for n in range(10)])
    api.enqueue_many(SMALL, [{"later": n} for n in range(2)], channel="c0", delay=3600)
    api.enqueue_many(SMALL, [{"p": n} for n in range(2)], channel="held")
    api.configure_channel(SMALL, "held", paused=True)
    leased = dequeue(SMALL, batch=2)
    assert len(leased) == 2
    assert fail(leased[0], discard=True) == "dead"


@pytest.fixture
def big_queue(small_queue: None) -> int:
    """QUEUE: BIG_CHANNELS channels of PER_CHANNEL messages, the channels interleaved in every
    page; one in ten scheduled, one channel paused, 5 in flight. Returns its waiting messages."""
    items = [
        Item({"n": n}, channel=f"tenant-{n % BIG_CHANNELS}", delay=3600 if n % 10 == 0 else None)
        for n in range(BIG_CHANNELS * PER_CHANNEL)
    ]
    for start in range(0, len(items), 5_000):
        api.enqueue_many(QUEUE, items[start : start + 5_000])
    api.configure_channel(QUEUE, "tenant-7", paused=True)
    assert len(dequeue(QUEUE, batch=5)) == 5
    return BIG_CHANNELS * PER_CHANNEL - 5


def test_below_the_cap_the_figures_are_exact(small_queue: None) -> None:
    exact = v2([SMALL])[SMALL]
    assert (exact["ready"], exact["scheduled"], exact["paused"], exact["in_flight"], exact["dead"]) == (
        8,
        2,
        2,
        1,
        1,
    )
    # SMALL holds 12 waiting messages over 4 channels: within a cap of 40 (and its channel
    # bound, cap / 10 = 4).
    for cap in (40, 1_000, 100_000):
        figures = v3([SMALL], cap)[SMALL]
        assert figures["estimated"] is False, cap
        assert_same(exact, figures)
    with override_settings(LONNYMQ_STATS_COUNT_CAP=1_000):
        (sample,) = QueueSample.live([SMALL])
    assert sample.estimated is False and (sample.ready, sample.dead) == (8, 1)


def test_one_past_either_bound_is_flagged() -> None:
    edge = "t_size_edge"
    api.enqueue_many(edge, [Item({"n": n}, channel=f"c{n % 4}") for n in range(41)])
    exact = v2([edge])[edge]
    assert v3([edge], 41)[edge]["estimated"] is False  # 41 waiting, 4 channels (41 / 10 = 4)
    past_messages = v3([edge], 40)[edge]  # 41 waiting: one past the cap; 4 channels: within
    assert past_messages["estimated"] is True
    # Estimated from a sample of the table's pages (all of them when it has at most 100), never
    # below what the walk counted: here, all 41.
    for key in ("ready", "scheduled", "paused"):
        assert past_messages[key] >= exact[key], key
    for key in ("channels", "paused_channels", "in_flight", "dead", "released_total"):
        assert past_messages[key] == exact[key], key
    assert v3([edge], 39)[edge]["estimated"] is True  # 4 channels: one past 39 / 10 = 3


def test_past_a_small_cap_the_figures_are_estimated_and_plausible(big_queue: int) -> None:
    exact = v2([QUEUE, SMALL])
    figures = v3(None, 1_000)
    mine = figures[QUEUE]
    assert mine["estimated"] is True
    # Exact whatever the cap: the channel rows, the leases, the dead letters (none here).
    for key in ("channels", "paused_channels", "in_flight", "dead", "released_total"):
        assert mine[key] == exact[QUEUE][key], key
    assert (mine["channels"], mine["paused_channels"], mine["in_flight"]) == (BIG_CHANNELS, 1, 5)
    # The sample reads about 100 of the table's pages: plausible, not exact.
    assert 0.6 * exact[QUEUE]["ready"] <= mine["ready"] <= 1.5 * exact[QUEUE]["ready"], (mine, exact[QUEUE])
    assert 0.5 * exact[QUEUE]["scheduled"] <= mine["scheduled"] <= 2 * exact[QUEUE]["scheduled"]
    assert 0.4 * exact[QUEUE]["paused"] <= mine["paused"] <= 2.5 * exact[QUEUE]["paused"]
    waiting = mine["ready"] + mine["scheduled"] + mine["paused"]
    assert waiting > 1_000  # never below what the walk counted
    assert abs(mine["oldest_ready_ms"] - exact[QUEUE]["oldest_ready_ms"]) < 5_000
    # The small queue beside it keeps its exact figures.
    assert figures[SMALL]["estimated"] is False
    assert_same(exact[SMALL], figures[SMALL])


def _reads() -> tuple[int, int]:
    """(ready-index entries, message heap tuples) this transaction has read so far."""
    index = scalar("SELECT pg_stat_get_xact_tuples_returned('lonnymq_message_ready_idx'::regclass)")
    heap = scalar(
        "SELECT pg_stat_get_xact_tuples_returned('lonnymq_message'::regclass)"
        " + pg_stat_get_xact_tuples_fetched('lonnymq_message'::regclass)"
    )
    return int(index), int(heap)


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_past_the_cap_the_work_does_not_grow_with_the_backlog(big_queue: int) -> None:
    # Not timing: the rows this transaction's statements read (pg_stat_xact counters). The
    # planner's statistics as autovacuum would leave them (a never analyzed table is planned
    # as a tiny one: a scan of it for the leases).
    rows("ANALYZE lonnymq_message, lonnymq_channel")
    before = _reads()
    v2([QUEUE])
    after_exact = _reads()
    # The control: v2 reads every waiting message (index entries or heap tuples).
    assert sum(after_exact) - sum(before) >= big_queue
    after_exact = _reads()
    v3([QUEUE], 1_000)
    after = _reads()
    index_read, heap_read = after[0] - after_exact[0], after[1] - after_exact[1]
    # The walk reads each channel in index order and stops at cap + 1 entries; the head probes
    # read one entry per channel looked at. (A custom plan, the first calls of a session, once
    # chose a bitmap scan and a sort per channel, which read each channel it visited whole:
    # 1,544 entries here, and without bound on a big channel; 0047 rules both out.)
    assert index_read <= 1_001 + 2 * BIG_CHANNELS, index_read
    # The sample reads about 100 pages of the table, not all of it.
    pages = scalar("SELECT pg_relation_size('lonnymq_message') / current_setting('block_size')::int")
    assert pages > 200, pages  # so that the sample is a part of the table
    assert heap_read < big_queue / 2, (heap_read, big_queue)


def test_dead_letters_past_the_cap_are_flagged(small_queue: None) -> None:
    rows(  # dead letters as the bench writes them: 50 more than make_dead could in a test
        """
        INSERT INTO lonnymq_dead_message (id, channel_id, queue, channel, payload, attempts, max_attempts,
                                          enqueued_at, died_at, reason, last_error)
        SELECT nextval('lonnymq_message_id_seq'), c.id, c.queue, c.name, jsonb_build_object('n', i), 1, 1,
               now(), now(), 'failed', 'boom'
          FROM generate_series(1, 50) AS i
          JOIN lonnymq_channel c ON c.queue = %s AND c.name = 'c1'
        """,
        [SMALL],
    )
    figures = v3([SMALL], 40)[SMALL]  # 12 waiting over 4 channels: within; 51 dead: past
    assert figures["estimated"] is True
    assert figures["dead"] >= 41  # estimated, never below the cap it passed
    assert (figures["ready"], figures["scheduled"], figures["paused"]) == (8, 2, 2)  # still exact
    exact = v3([SMALL], 51)[SMALL]
    assert (exact["estimated"], exact["dead"]) == (False, 51)


def test_the_cap_is_checked() -> None:
    with pytest.raises(Exception, match="cap"):
        v3(None, 0)


def test_recording_returns_the_flag_and_stores_the_figures(small_queue: None) -> None:
    with override_settings(LONNYMQ_STATS_COUNT_CAP=5):
        recorded = {s.queue: s for s in QueueSample.record(keep_ms=60_000)}
    sample = recorded[SMALL]
    assert sample.pk is not None and sample.estimated is True  # 12 waiting: past a cap of 5
    stored = QueueSample.objects.get(pk=sample.pk)
    keys = ("ready", "scheduled", "paused", "in_flight", "dead", "channels")
    assert {k: getattr(stored, k) for k in keys} == {k: getattr(sample, k) for k in keys}
    assert (stored.in_flight, stored.dead, stored.channels) == (1, 1, 4)  # exact past the cap
    assert stored.estimated is False  # not stored: a sample read back holds figures only
    assert (
        scalar("SELECT lonnymq_record_samples_due_v2(1000::bigint, 60000::bigint, 5::bigint)") == 0
    )  # a sample was just recorded
