"""Enqueue on the caller's transaction: it commits or rolls back with the caller's rows.

These tests commit for real (transaction=True) and look from a second real connection.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection, transaction

from django_lonnymq import Item, enqueue, enqueue_many
from tests.harness.helpers import ack, assert_healthy, channel_row, counts, dequeue, enqueue_sql, messages_of

pytestmark = pytest.mark.django_db(transaction=True)


class Rollback(Exception):  # noqa: N818 - a request, not an error
    pass


def test_rollback_leaves_no_message_and_no_channel(connect):
    other = connect()
    with pytest.raises(Rollback), transaction.atomic():
        message_id = enqueue("tx", {"order": 1}, channel="new-tenant")
        assert messages_of("tx")[0]["id"] == message_id  # visible inside
        raise Rollback
    assert messages_of("tx", conn=other) == []
    assert channel_row("tx", "new-tenant", conn=other) is None
    assert dequeue("tx", conn=other) == []
    found = counts(conn=other)
    assert {"lonnymq_channel", "lonnymq_message", "lonnymq_dedup", "lonnymq_wake"} <= set(found)
    assert set(found.values()) == {0}  # no row in any of the app's tables


def test_enqueue_many_rolls_back_as_a_whole(connect):
    other = connect()
    with pytest.raises(Rollback), transaction.atomic():
        enqueue_many("tx", [Item(n, channel=f"c{n}", dedup_key=f"k{n}") for n in range(5)])
        raise Rollback
    assert counts(conn=other)["lonnymq_message"] == 0
    assert counts(conn=other)["lonnymq_dedup"] == 0
    # The dedup keys were not kept: the same batch enqueues for real afterwards.
    got = enqueue_many("tx", [Item(n, channel=f"c{n}", dedup_key=f"k{n}") for n in range(5)])
    assert len(set(got)) == 5 and len(messages_of("tx", conn=other)) == 5


def test_enqueue_many_outside_atomic_commits_at_once_and_is_logged_like_any_query(connect):
    """enqueue_many sends its arrays on a binary cursor over Django's connection: autocommit
    and query logging behave as for any other query."""
    from django.test.utils import CaptureQueriesContext

    other = connect()
    with CaptureQueriesContext(connection) as captured:
        got = enqueue_many("tx", [{"n": 1}, {"n": 2}])
    assert any("lonnymq_enqueue_many_v4" in q["sql"] for q in captured.captured_queries)
    assert sorted(m["id"] for m in messages_of("tx", conn=other)) == sorted(got)


def test_commit_keeps_the_message_and_another_connection_dequeues_it(connect):
    other = connect()
    with transaction.atomic():
        message_id = enqueue("tx", {"order": 2}, channel="t")
        # Not visible, so not deliverable, before the commit.
        assert messages_of("tx", conn=other) == []
        assert dequeue("tx", conn=other) == []
    [row] = dequeue("tx", conn=other)
    assert row["id"] == message_id and row["payload"] == {"order": 2}
    assert ack([row], conn=other) == [message_id]
    assert_healthy()


def test_a_message_committed_after_a_dequeuer_drained_its_channel_is_not_stranded(connect):
    """The lost wake-up: a dequeuer takes the last visible message of a channel while an
    enqueue into that channel is still uncommitted; the channel must not be parked."""
    other = connect()
    first = enqueue("tx", "first", channel="busy")  # committed: the channel is awake
    with transaction.atomic():
        second = enqueue("tx", "second", channel="busy")
        got = dequeue("tx", batch=10, conn=other)
        assert [r["id"] for r in got] == [first]
        assert channel_row("tx", "busy", conn=other)["next_dequeue_at"] is not None, "channel parked"
    deadline = time.monotonic() + 3
    found: list = []
    while not found and time.monotonic() < deadline:
        found = dequeue("tx", batch=10, conn=other)
        if not found:
            time.sleep(0.02)
    assert [r["id"] for r in found] == [second], "committed message stranded in its channel"
    ack(got + found, conn=other)
    assert_healthy()


def test_a_dequeue_rolled_back_with_its_transaction_leaves_the_message_ready(connect):
    message_id = enqueue("tx", "x")
    other = connect(autocommit=False)
    [row] = dequeue("tx", conn=other)
    assert row["id"] == message_id
    other.rollback()
    assert messages_of("tx")[0]["lease_token"] is None
    assert [r["id"] for r in dequeue("tx")] == [message_id]


def test_repeatable_read_producer_into_a_busy_channel_is_delivered_after_commit(connect, dsn):
    ready = enqueue("tx", "ready", channel="busy")
    producer = psycopg.connect(dsn, autocommit=False)
    producer.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    try:
        late = enqueue_sql("tx", '"late"', channel="busy", conn=producer)
        dequeuer = connect()
        early = dequeue("tx", batch=10, conn=dequeuer)
        assert late not in [r["id"] for r in early]
        producer.commit()
        got = early
        deadline = time.monotonic() + 3
        while {ready, late} - {r["id"] for r in got} and time.monotonic() < deadline:
            got += dequeue("tx", batch=10, conn=dequeuer)
            time.sleep(0.02)
        assert sorted(r["id"] for r in got) == sorted([ready, late])
    finally:
        producer.close()
    assert_healthy()


def test_enqueue_uses_the_callers_connection_and_transaction():
    with transaction.atomic():
        enqueue("tx", "x")
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM lonnymq_message m JOIN lonnymq_channel c"
                " ON c.id = m.channel_id WHERE c.queue = 'tx'"
            )
            assert cursor.fetchone()[0] == 1
        transaction.set_rollback(True)
    assert messages_of("tx") == []


def test_enqueues_into_a_channel_no_worker_has_visited_leave_one_mark(connect):
    """A committed wake-up mark early enough serves later enqueues too; an earlier-due
    message still leaves its own. Every message is then delivered."""
    other = connect()
    for n in range(5):
        enqueue("marks", {"n": n}, channel="fresh")  # each in its own transaction
    channel_id = channel_row("marks", "fresh", conn=other)["id"]
    mark_count = "SELECT count(*) FROM lonnymq_wake WHERE channel_id = %s"
    with other.cursor() as cur:
        assert cur.execute(mark_count, [channel_id]).fetchone()[0] == 1
        enqueue("marks", {"n": "urgent"}, channel="fresh", priority=10)  # due 10 s earlier
        assert cur.execute(mark_count, [channel_id]).fetchone()[0] == 2
    got = dequeue("marks", batch=10, conn=other)
    assert [r["payload"] for r in got][0] == {"n": "urgent"}
    assert sorted(r["payload"]["n"] for r in got[1:]) == [0, 1, 2, 3, 4]
    with other.cursor() as cur:
        assert cur.execute(mark_count, [channel_id]).fetchone()[0] == 0  # applied, deleted
    assert_healthy()
