"""A hot channel does not serialize its producers (structural, no timing).

Producer A enqueues into a channel and keeps its transaction open (a slow web request).
Producer B, with ``lock_timeout`` and ``statement_timeout`` of 2 s, enqueues into the same
channel: if B had to wait for A's row lock it would fail with a lock or statement timeout,
since A stays open for the whole test. Meanwhile a dequeuer can still lease from the channel:
it locks the channel row FOR NO KEY UPDATE, which does not conflict with the KEY SHARE lock
a foreign-key check of A's insert may hold.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.sql.concurrency import sqlcalls as q

# django_independent: SQL through psycopg only; Django only makes the test database (CONTRIBUTING.md)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.django_independent]


def _impatient(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """A producer that fails instead of waiting more than 2 s for any lock or statement."""
    conn.execute("SET lock_timeout = '2s'")
    conn.execute("SET statement_timeout = '2s'")
    conn.commit()
    return conn


def _enqueue_without_waiting(conn: psycopg.Connection[Any], call: Callable[[], Any]) -> Any:
    try:
        return call()
    except psycopg.Error as exc:
        if q.sqlstate(exc) in (q.LOCK_NOT_AVAILABLE, q.QUERY_CANCELED):
            pytest.fail(f"the second producer waited for the first one's lock: {exc}")
        raise


@pytest.mark.parametrize("first_call", ["enqueue", "enqueue_many"])
def test_busy_channel_second_producer_does_not_wait_and_dequeuers_still_lease(
    connect: Callable[..., psycopg.Connection[Any]], first_call: str,
) -> None:
    admin, dequeuer = connect(), connect()
    # (A channel created inside an open transaction is another matter: a concurrent first
    # enqueue into the same new channel waits on the unique index until that commits.)
    ready = [q.enqueue(admin, "hot", "tenant") for _ in range(3)]  # the channels are busy
    ready.append(q.enqueue(admin, "hot", "other"))
    q.apply_marks(admin, "hot")  # as a worker's next dequeue would
    assert q.channel_state(admin, "hot", "tenant")["next_dequeue_at"] is not None

    a = connect(autocommit=False)
    if first_call == "enqueue":
        a_ids = [q.enqueue(a, "hot", "tenant", {"from": "A"})]
    else:
        a_ids = q.enqueue_many(a, "hot", ["tenant", "tenant", "other"], [{"from": "A"}] * 3)
    # A's transaction stays open from here to the end of the test.

    b = _impatient(connect(autocommit=False))
    b_one = _enqueue_without_waiting(b, lambda: q.enqueue(b, "hot", "tenant", {"from": "B"}))
    b_many = _enqueue_without_waiting(
        b, lambda: q.enqueue_many(b, "hot", ["tenant", "other", "tenant"], [{"from": "B"}] * 3)
    )
    b.commit()

    # A third producer in autocommit, also impatient.
    c = _impatient(connect(autocommit=False))
    c_one = _enqueue_without_waiting(c, lambda: q.enqueue(c, "hot", "tenant", {"from": "C"}))
    c.commit()

    # The dequeuer is not blocked by A either: it leases everything committed.
    dequeuer.execute("SET lock_timeout = '2s'")
    dequeuer.execute("SET statement_timeout = '2s'")
    got = []
    for _ in range(5):
        leased = q.dequeue(dequeuer, "hot", 20)
        q.ack(dequeuer, leased)
        got += [r[0] for r in leased]
    committed = [*ready, b_one, *b_many, c_one]
    assert sorted(got) == sorted(committed)
    assert not set(got) & set(a_ids)

    a.commit()
    late: list[int] = []
    for _ in range(50):
        leased = q.dequeue(dequeuer, "hot", 20)
        q.ack(dequeuer, leased)
        late += [r[0] for r in leased]
        if len(late) >= len(a_ids):
            break
        dequeuer.execute("SELECT pg_sleep(0.05)")
    assert sorted(late) == sorted(a_ids)
    assert q.check(admin, 0) == []


def test_busy_channel_enqueue_leaves_the_channel_row_unlocked(
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    """While A is open after enqueueing into a busy channel, anyone can lock the channel row
    FOR NO KEY UPDATE at once (A holds no row lock that a dequeuer would have to wait for)."""
    admin = connect()
    q.enqueue(admin, "hot", "tenant")
    a = connect(autocommit=False)
    q.enqueue(a, "hot", "tenant", {"from": "A"})
    probe = connect(autocommit=False)
    probe.execute("SELECT 1 FROM lonnymq_channel WHERE queue = 'hot' AND name = 'tenant' FOR NO KEY UPDATE NOWAIT")
    probe.rollback()
    a.rollback()


def test_idle_channel_second_producer_does_not_wait_for_the_first(
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    """The channel is idle (drained, parked): that is the usual state of a tenant whose
    workers keep up. A wakes it and stays open; B's enqueue into the same channel must not
    wait for A's commit, and after both commit both messages come out."""
    admin, dequeuer = connect(), connect()
    first = q.enqueue(admin, "hot", "tenant")
    assert [r[0] for r in q.dequeue(dequeuer, "hot", 5)] == [first]
    assert q.dequeue(dequeuer, "hot", 5) == []
    assert q.channel_state(admin, "hot", "tenant")["next_dequeue_at"] is None

    a = connect(autocommit=False)
    a_id = q.enqueue(a, "hot", "tenant", {"from": "A"})
    b = _impatient(connect(autocommit=False))
    b_id = _enqueue_without_waiting(b, lambda: q.enqueue(b, "hot", "tenant", {"from": "B"}))
    b.commit()
    got = []
    for _ in range(50):
        leased = q.dequeue(dequeuer, "hot", 5)
        got += [r[0] for r in leased]
        if got:
            break
        dequeuer.execute("SELECT pg_sleep(0.05)")
    assert got == [b_id]
    a.commit()
    for _ in range(50):
        leased = q.dequeue(dequeuer, "hot", 5)
        got += [r[0] for r in leased]
        if len(got) == 2:
            break
        dequeuer.execute("SELECT pg_sleep(0.05)")
    assert got == [b_id, a_id]


def test_two_requests_waking_two_idle_channels_in_opposite_orders_do_not_deadlock(
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    """Request A enqueues for tenant x then y, request B for y then x, both channels idle.
    Neither may wait for the other (a wait here is half of a deadlock)."""
    admin = connect()
    for name in ("x", "y"):
        q.configure(admin, "hot", name)
    a = _impatient(connect(autocommit=False))
    b = _impatient(connect(autocommit=False))
    q.enqueue(a, "hot", "x")
    q.enqueue(b, "hot", "y")
    _enqueue_without_waiting(a, lambda: q.enqueue(a, "hot", "y"))
    _enqueue_without_waiting(b, lambda: q.enqueue(b, "hot", "x"))
    a.commit()
    b.commit()
    dequeuer = connect()
    got = []
    for _ in range(50):
        got += [r[0] for r in q.dequeue(dequeuer, "hot", 10)]
        if len(got) == 4:
            break
        dequeuer.execute("SELECT pg_sleep(0.05)")
    assert len(got) == 4
