"""A transaction that writes to many channels holds advisory locks until it ends, from a
lock table the whole server shares (docs/scaling.md, "Many channels in one transaction"):
one per channel, or past 64 channels in one call one per stripe (at most 1,024). When that
table is full the call fails with a typed error that says so and what to do, and nothing
it wrote stays.

The table is filled by another session holding plain advisory locks, as another producer's
bulk transaction would, then emptied again before the test ends.
"""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection, transaction

from django_lonnymq import Item, Workflow, api
from django_lonnymq.exceptions import LockTableFull
from django_lonnymq.models import Channel, Message

# alone: it fills the server's shared lock table, which every other test on it would see
# (CONTRIBUTING.md)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.alone]

QUEUE = "t_locks"
CHUNK = 200  # locks taken per savepoint while filling: the table ends at most this far from full


def fill_lock_table(conn: psycopg.Connection) -> int:
    """Take advisory locks in ``conn``'s open transaction until the server refuses one more
    chunk; returns how many it holds. A refused chunk is rolled back to its savepoint, so the
    others are kept and fewer than ``CHUNK`` slots stay free."""
    held = 0
    while True:
        conn.execute("SAVEPOINT fill")
        try:
            conn.execute(
                "SELECT count(pg_advisory_xact_lock_shared(-77, g)) FROM generate_series(%s::integer, %s::integer) g",
                [held + 1, held + CHUNK],
            )
        except psycopg.errors.OutOfMemory:
            conn.execute("ROLLBACK TO SAVEPOINT fill")
            return held
        conn.execute("RELEASE SAVEPOINT fill")
        held += CHUNK
        assert held < 10_000_000, "the server never refused an advisory lock"


def advisory_locks(watcher: psycopg.Connection, holder: psycopg.Connection) -> int:
    """How many advisory locks ``holder``'s session holds, as ``watcher`` sees them."""
    return watcher.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s", [holder.info.backend_pid]
    ).fetchone()[0]


def test_a_write_to_many_channels_when_the_lock_table_is_full_raises_lock_table_full(connect):
    api.enqueue(QUEUE, {"before": True}, channel="existing")
    other = connect(autocommit=False)
    held = fill_lock_table(other)
    try:
        assert held >= 1_000  # the server's table holds thousands (64 x 100 slots by default)
        with pytest.raises(LockTableFull) as caught, transaction.atomic():
            api.enqueue_many(QUEUE, [Item({"n": n}, channel=f"tenant-{n}") for n in range(2 * CHUNK)])
    finally:
        other.rollback()
    message = str(caught.value)
    assert "lock table is full" in message
    assert "max_locks_per_transaction" in message
    assert "out of shared memory" in caught.value.detail
    assert isinstance(caught.value.__cause__, Exception)
    # Nothing it wrote stays: the one message and channel from before, no more.
    assert Message.objects.filter(channel__queue=QUEUE).count() == 1
    assert list(Channel.objects.filter(queue=QUEUE).values_list("name", flat=True)) == ["existing"]
    # With the other session's locks gone, the same call goes through.
    ids = api.enqueue_many(QUEUE, [Item({"n": n}, channel=f"tenant-{n}") for n in range(2 * CHUNK)])
    assert len(ids) == 2 * CHUNK


def test_a_bulk_enqueue_into_thousands_of_channels_holds_at_most_one_lock_per_stripe(connect):
    """Two enqueue_many() of 5,000 channels each, open at once, hold 1,024 advisory locks each
    (one per stripe), not 5,000: together they fit a default server's table many times."""
    producers = [connect(autocommit=False) for _ in range(2)]
    watcher = connect()
    try:
        for n, conn in enumerate(producers):
            conn.execute(
                "SELECT lonnymq_enqueue_many_v2(%s, array(SELECT %s || g FROM generate_series(1, 5000) g),"
                " array_fill('{}'::jsonb, ARRAY[5000]))",
                [QUEUE, f"p{n}-"],
            )
        for conn in producers:
            assert advisory_locks(watcher, conn) == 1024
        for conn in producers:
            conn.commit()
    finally:
        for conn in producers:
            conn.rollback()
    assert Message.objects.filter(channel__queue=QUEUE).count() == 10_000


def make_dead_letters(conn: psycopg.Connection, channels: int) -> list[int]:
    """One dead letter in each of ``channels`` channels that no longer exist (a requeue
    creates them again), as the dead-letter table holds them."""
    return [
        row[0]
        for row in conn.execute(
            "INSERT INTO lonnymq_dead_message (id, queue, channel, payload, attempts, max_attempts, enqueued_at,"
            " reason, last_error) SELECT nextval('lonnymq_message_id_seq'), %s, 'dead-' || g, jsonb_build_object('n', g),"
            " 1, 1, now(), 'failed', 'boom' FROM generate_series(1, %s) g RETURNING id",
            [QUEUE, channels],
        ).fetchall()
    ]


@pytest.mark.parametrize(("channels", "locks"), [(10, 10), (2_000, 1_024)])
def test_a_requeue_of_dead_letters_holds_a_lock_per_channel_or_per_stripe(connect, channels, locks):
    """Up to 64 channels, one shared lock per channel; past that, one per stripe: a requeue of
    the dead letters of thousands of tenants does not fill the server's lock table."""
    setup, requeuer, watcher = connect(), connect(autocommit=False), connect()
    ids = make_dead_letters(setup, channels)
    requeued = requeuer.execute("SELECT lonnymq_requeue_dead_v1(%s::bigint[])", [ids]).fetchone()[0]
    assert sorted(requeued) == sorted(ids)
    assert advisory_locks(watcher, requeuer) == locks
    requeuer.commit()
    assert Message.objects.filter(channel__queue=QUEUE, attempts=0).count() == channels
    assert Channel.objects.filter(queue=QUEUE).count() == channels
    assert not setup.execute(
        "SELECT count(*) FROM lonnymq_dead_message WHERE queue = %s", [QUEUE]
    ).fetchone()[0]
    assert not api.check()


@pytest.mark.parametrize(("channels", "locks"), [(10, 10), (2_000, 1_024)])
def test_run_now_of_messages_in_thousands_of_channels_holds_a_lock_per_stripe(connect, channels, locks):
    scheduled = api.enqueue_many(
        QUEUE, [Item({"n": n}, channel=f"later-{n}", delay=3600) for n in range(channels)]
    )
    runner, watcher = connect(autocommit=False), connect()
    moved = runner.execute("SELECT lonnymq_run_now_v1(%s::bigint[])", [scheduled]).fetchone()[0]
    assert sorted(moved) == sorted(scheduled)
    assert advisory_locks(watcher, runner) == locks
    runner.commit()
    ready = runner.execute(
        "SELECT count(*) FROM lonnymq_message WHERE id = ANY (%s) AND dequeue_at <= lonnymq_now_ms_v1()",
        [scheduled],
    ).fetchone()[0]
    runner.commit()
    assert ready == channels
    assert not api.check()


def test_a_workflow_whose_roots_name_thousands_of_channels_holds_a_lock_per_stripe(connect):
    """A start writes its root steps' messages (lonnymq_workflow_release_v1) under one shared
    lock per stripe past 64 channels, then every root is a ready message of its channel."""
    starter, watcher = connect(autocommit=False), connect()
    with transaction.atomic():
        flow = Workflow("wide", channel="tenant-0")
        for n in range(2_000):
            flow.step(QUEUE, {"n": n}, name=f"root-{n}", channel=f"root-{n}")
        workflow_id = flow.start()
        # The start's locks, held by the Django connection until its commit.
        held = advisory_locks(watcher, connection.connection)
    assert held == 1_024
    assert Message.objects.filter(channel__queue=QUEUE).count() == 2_000
    assert Channel.objects.filter(queue=QUEUE).count() == 2_000
    assert (
        starter.execute("SELECT state FROM lonnymq_workflow WHERE id = %s", [workflow_id]).fetchone()[0]
        == "running"
    )
    starter.rollback()
    assert not api.check()


def test_thousands_of_single_enqueues_in_one_transaction_hold_at_most_64_channel_locks(connect):
    """A transaction's first 64 channels get a lock each, every later one its stripe's: 2,000
    enqueue() calls into 2,000 channels hold 64 + 1,024 advisory locks, not 2,000 (a loop over
    the tenants inside transaction.atomic() is the ordinary way to get there)."""
    producer, watcher = connect(autocommit=False), connect()
    statement = "SELECT lonnymq_enqueue_v2(%s, %s, '{}'::jsonb)"
    for n in range(10):
        producer.execute(statement, [QUEUE, f"one-{n}"])
    assert advisory_locks(watcher, producer) == 10
    # A savepoint rolled back gives back its locks and its count alike.
    producer.execute("SAVEPOINT s")
    for n in range(100):
        producer.execute(statement, [QUEUE, f"gone-{n}"])
    producer.execute("ROLLBACK TO SAVEPOINT s")
    assert advisory_locks(watcher, producer) == 10
    for n in range(10, 2_000):
        producer.execute(statement, [QUEUE, f"one-{n}"])
    channel_locks, stripe_locks = watcher.execute(
        "SELECT count(*) FILTER (WHERE classid::bigint = (SELECT lonnymq_lock_ns_v1())),"
        " count(*) FILTER (WHERE classid::bigint = (SELECT lonnymq_stripe_lock_ns_v1()))"
        " FROM pg_locks WHERE locktype = 'advisory' AND pid = %s",
        [producer.info.backend_pid],
    ).fetchone()
    assert (channel_locks, stripe_locks) == (64, 1_024)
    producer.commit()
    assert Message.objects.filter(channel__queue=QUEUE).count() == 2_000
    # The next transaction starts counting again.
    producer.execute(statement, [QUEUE, "one-0"])
    assert advisory_locks(watcher, producer) == 1
    producer.commit()
    assert not api.check()
