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
from django.db import transaction

from django_lonnymq import Item, api
from django_lonnymq.exceptions import LockTableFull
from django_lonnymq.models import Channel, Message

pytestmark = pytest.mark.django_db(transaction=True)

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
            held = watcher.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s",
                [conn.info.backend_pid],
            ).fetchone()[0]
            assert held == 1024
        for conn in producers:
            conn.commit()
    finally:
        for conn in producers:
            conn.rollback()
    assert Message.objects.filter(channel__queue=QUEUE).count() == 10_000
