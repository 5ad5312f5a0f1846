"""The dequeue while a snapshot holds the horizon back (docs/performance.md, "A held snapshot").

Every visit of a channel moves its key in the eligible index, and while another session holds
a snapshot open no VACUUM can remove the entries it leaves: a scan from the front of the
queue's range reads all of them. A session whose scan from the front read many more entries
than it picked starts its next scans at the earliest turn that scan picked (its mark), and
scans from the front again after a while (at most a second), so a channel whose turn lies
before the mark still comes, a little later; once the entries are gone it scans from the
front at every call again.

One connection dequeues and acks, in a transaction per call, so the eligible index's entries
each call read are that transaction's own counter.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from tests.harness.helpers import ack, dequeue, enqueue_sql, fail, named, release, rows, scalar

pytestmark = pytest.mark.django_db(transaction=True)

Q = "horizon"
CHANNELS = 400
PER_CHANNEL = 40

ENTRIES_READ = "SELECT pg_stat_get_xact_tuples_returned('lonnymq_channel_eligible_idx'::regclass)"
STATE = "SELECT current_setting('lonnymq.eligible_from_' || md5(%s), true)"


def _fill(conn: Any) -> int:
    channels = [f"c{i}" for i in range(CHANNELS) for _ in range(PER_CHANNEL)]
    named(
        "enqueue_many",
        conn,
        queue=Q,
        channels=channels,
        payloads=["{}"] * len(channels),
        run_at_ms=None,
        delay_ms=None,
        priorities=None,
        dedup_keys=None,
        on_duplicate=None,
        max_attempts=None,
        default_max_attempts=5,
        priority_step_ms=1000,
        tolerance_ms=50,
        costs=None,
        slots=None,
    )
    return len(channels)


class Dequeuer:
    """One dequeue and its ack per transaction, with what the call read and when it ran."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.delivered: list[int] = []

    def call(self) -> tuple[list[dict[str, Any]], int, int]:
        before = int(scalar(ENTRIES_READ, conn=self.conn))
        now = int(scalar("SELECT lonnymq_now_ms_v1()", conn=self.conn))
        got = dequeue(Q, batch=100, conn=self.conn)
        read = int(scalar(ENTRIES_READ, conn=self.conn)) - before
        if got:
            ack(got, conn=self.conn)
        self.conn.commit()
        self.delivered += [r["id"] for r in got]
        return got, read, now

    def _set_state(self, value: str) -> None:
        scalar("SELECT set_config('lonnymq.eligible_from_' || md5(%s), %s, false)", [Q, value], conn=self.conn)
        self.conn.commit()

    def hold_mark(self, mark: int) -> None:
        """Scan from ``mark`` until the test says otherwise (the next front scan a minute away)."""
        now = int(scalar("SELECT lonnymq_now_ms_v1()", conn=self.conn))
        self._set_state(f"{now + 60_000} {mark}")

    def scan_from_front_next(self) -> None:
        """The session's mark and the queue's shared one both due for a scan from the front."""
        state = self.state()
        assert state is not None
        self.conn.execute("UPDATE lonnymq_eligible_mark SET front_at = 0 WHERE queue = %s", [Q])
        self._set_state(f"0 {state[1]}")

    def state(self) -> tuple[int, int] | None:
        value = scalar(STATE, [Q], conn=self.conn)
        self.conn.commit()
        if not value:
            return None
        front_at, mark = value.split()
        return int(front_at), int(mark)


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_under_a_held_snapshot_the_dequeue_starts_at_its_mark_and_still_serves_every_channel(
    connect: Any,
) -> None:
    setup, holder, conn = connect(), connect(), connect(autocommit=False)
    total = _fill(setup)
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1")  # the snapshot: VACUUM can remove nothing written after it
    worker = Dequeuer(conn)

    # Visits pile dead entries at the front of the eligible index until a scan from the front
    # reads more than 5,000 entries beyond ten per channel it picks.
    front_reads = []
    while worker.state() is None:
        got, read, now = worker.call()
        assert got, "the backlog ran out before the dequeue scanned from a mark"
        front_reads.append(read)
    assert front_reads[-1] > 5000 + 10 * 100
    front_at, mark = worker.state() or (0, 0)
    # The next scan from the front: 1 ms per 100 entries read, at most a second later.
    assert now < front_at <= now + min(front_reads[-1] // 100, 1000) + 50
    assert mark <= now

    # Until that time, calls start at the mark: they read a fraction of what the scan from the
    # front read, and pick as many channels. (The test moves that time away, so however slow
    # the machine, the calls below run before it.)
    worker.hold_mark(mark)
    got, read, _ = worker.call()
    assert len({r["channel"] for r in got}) == 100
    assert read * 5 < front_reads[-1], (read, front_reads[-1])

    # A channel whose turn lies before the mark (a priority message wakes a new channel 100 s
    # in the past) waits for the next scan from the front; calls from the mark serve the others.
    late = enqueue_sql(Q, channel="late", priority=100, priority_step_ms=1000, conn=setup)
    for _ in range(3):
        got, _, _ = worker.call()
        assert len(got) == 100 and late not in [r["id"] for r in got]
    worker.scan_from_front_next()
    got, _, _ = worker.call()
    assert got[0]["id"] == late, "the scan from the front serves the earliest turn first"

    # A mark past every turn finds nothing: the same call scans from the front.
    worker.hold_mark(int(scalar("SELECT lonnymq_now_ms_v1()", conn=setup)) + 10**9)
    got, _, _ = worker.call()
    assert len({r["channel"] for r in got}) == 100

    # The snapshot ends and VACUUM (autovacuum's part) removes the dead entries: the next scan
    # from the front reads few, and every call scans from the front again.
    holder.execute("COMMIT")
    setup.execute("VACUUM lonnymq_channel")
    worker.scan_from_front_next()
    got, read, _ = worker.call()
    assert got and read <= 5000 + 10 * 100
    assert worker.state() is None, "the mark outlived the snapshot"

    # Every message, once.
    while True:
        got, _, _ = worker.call()
        if not got:
            break
    assert sorted(worker.delivered) == sorted(set(worker.delivered))
    assert len(worker.delivered) == total + 1
    assert int(scalar("SELECT count(*) FROM lonnymq_message", conn=setup)) == 0
    assert rows("SELECT * FROM lonnymq_check_v2(0)", conn=setup) == []


READY_ENTRIES_READ = "SELECT pg_stat_get_xact_tuples_returned('lonnymq_message_ready_idx'::regclass)"


def test_under_a_held_snapshot_a_channel_s_next_head_is_read_after_what_the_call_leased(connect: Any) -> None:
    """The ready index keeps an entry for every message taken since the snapshot, at the front
    of the channel's range: the dequeue reads them once (its candidates), not again for the
    channel's next head, which it looks for after the last message it leased."""
    setup, holder, conn = connect(), connect(), connect(autocommit=False)
    named(
        "enqueue_many", setup, queue=Q, channels=["deep"] * 1500, payloads=["{}"] * 1500, run_at_ms=None,
        delay_ms=None, priorities=None, dedup_keys=None, on_duplicate=None, max_attempts=None,
        default_max_attempts=5, priority_step_ms=1000, tolerance_ms=50, costs=None, slots=None,
    )
    later = enqueue_sql(Q, channel="deep", delay_ms=3_600_000, conn=setup)  # its head once the rest is gone
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1")  # the snapshot: VACUUM can remove nothing written after it
    taken = 0
    while taken < 1500:
        # Candidates from the front of the range every time (the scans that start after the
        # last message taken: the next test).
        _set_ready_state(conn, "")
        before = int(scalar(READY_ENTRIES_READ, conn=conn))
        got = dequeue(Q, batch=100, conn=conn)
        read = int(scalar(READY_ENTRIES_READ, conn=conn)) - before
        assert len(got) == 100 and later not in [r["id"] for r in got]
        if taken + 100 < 1500:
            # Candidates: the `taken` entries the snapshot keeps, then the 100 leased; the
            # head: the next one. A head read from the front would read all of them again.
            assert taken + 100 <= read <= taken + 100 + 10, (taken, read)
        else:
            # The last of them: the head is the delayed message, an hour away, so the channel
            # moves far ahead only after its second look, which reads from the front.
            assert 2 * (taken + 100) <= read <= 2 * (taken + 100) + 10, (taken, read)
        ack(got, conn=conn)
        conn.commit()
        taken += 100
    # The delayed message is the channel's next turn.
    next_at = scalar("SELECT next_dequeue_at FROM lonnymq_channel WHERE queue = %s AND name = 'deep'", [Q], conn=setup)
    dequeue_at = scalar("SELECT dequeue_at FROM lonnymq_message WHERE id = %s", [later], conn=setup)
    assert next_at == dequeue_at
    holder.execute("COMMIT")
    assert rows("SELECT * FROM lonnymq_check_v2(0)", conn=setup) == []


READY_STATE = "SELECT current_setting('lonnymq.ready_from_' || md5(%s), true)"


def _ready_state(conn: Any) -> str | None:
    value = scalar(READY_STATE, [Q], conn=conn)
    conn.commit()
    return value or None


def _set_ready_state(conn: Any, value: str) -> None:
    scalar("SELECT set_config('lonnymq.ready_from_' || md5(%s), %s, false)", [Q, value], conn=conn)
    conn.commit()


def _ready_scan_from_front_next(conn: Any) -> None:
    """The session's time and the queue's shared one (0062) both past: the next candidate
    scan is from the front."""
    conn.execute("UPDATE lonnymq_ready_mark SET until = 0 WHERE queue = %s", [Q])
    _set_ready_state(conn, "0")


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_under_a_held_snapshot_candidates_are_read_after_the_last_message_taken(connect: Any) -> None:
    """Each candidate scan from the front of a channel's range reads an entry for every message
    taken since the snapshot. Once one reads more than 1,000 entries beyond two per candidate,
    the session's scans start after the last message a dequeue took from the channel, and from
    the front again at the time its state names (at most a second away), which serves a message
    put behind that point; once the entries are gone every scan is from the front again."""
    setup, holder, conn = connect(), connect(), connect(autocommit=False)
    total = 3000
    named(
        "enqueue_many", setup, queue=Q, channels=["deep"] * total, payloads=["{}"] * total, run_at_ms=None,
        delay_ms=None, priorities=None, dedup_keys=None, on_duplicate=None, max_attempts=None,
        default_max_attempts=5, priority_step_ms=1000, tolerance_ms=50, costs=None, slots=None,
    )
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1")  # the snapshot: VACUUM can remove nothing written after it
    delivered: list[int] = []

    def call() -> tuple[list[dict[str, Any]], int, int]:
        before = int(scalar(READY_ENTRIES_READ, conn=conn))
        now = int(scalar("SELECT lonnymq_now_ms_v1()", conn=conn))
        got = dequeue(Q, batch=100, conn=conn)
        read = int(scalar(READY_ENTRIES_READ, conn=conn)) - before
        if got:
            ack(got, conn=conn)
        conn.commit()
        delivered.extend(r["id"] for r in got)
        return got, read, now

    reads = []
    while _ready_state(conn) is None:
        got, read, now = call()
        assert len(got) == 100, "the backlog ran out before the scans started after the taken"
        reads.append(read)
    # The candidates' scan read every message taken so far, then the 100 it took.
    assert reads[-1] > 1000 + 2 * 100
    assert len(delivered) <= 1000 + 2 * 100 + 100
    front_at = int(_ready_state(conn) or 0)
    assert now < front_at <= now + min(reads[-1] // 10, 1000) + 50

    # Until then (moved a minute away, so however slow the machine the calls below run
    # before it), a call reads its 100 candidates and the next head, not the taken again.
    _set_ready_state(conn, str(now + 60_000))
    got, read, _ = call()
    assert len(got) == 100
    assert read <= 100 + 10, read

    # A message put behind that point (a priority 100 s in the past) waits for the next scan
    # from the front, which serves it first.
    late = enqueue_sql(Q, channel="deep", priority=100, priority_step_ms=1000, conn=setup)
    got, _, _ = call()
    assert len(got) == 100 and late not in [r["id"] for r in got]
    _ready_scan_from_front_next(conn)
    got, read, _ = call()
    assert got[0]["id"] == late
    assert read > 1000, "that call scanned from the front"
    assert _ready_state(conn) is not None, "and started after the taken again"

    # The snapshot ends and VACUUM (autovacuum's part) removes the dead entries: the next scan
    # from the front reads few, and every scan is from the front again.
    holder.execute("COMMIT")
    setup.execute("VACUUM lonnymq_message")
    _ready_scan_from_front_next(conn)
    got, read, _ = call()
    assert len(got) == 100 and read <= 100 + 10, read
    assert _ready_state(conn) is None, "the state outlived the snapshot"

    # Every message, once.
    while call()[0]:
        pass
    assert sorted(delivered) == sorted(set(delivered))
    assert len(delivered) == total + 1
    assert int(scalar("SELECT count(*) FROM lonnymq_message", conn=setup)) == 0
    assert rows("SELECT * FROM lonnymq_check_v2(0)", conn=setup) == []


def test_after_the_taken_an_ordered_channel_keeps_its_order_and_a_lease_given_back_comes_next(
    connect: Any,
) -> None:
    """While the candidate scans start after the last message taken, an ordered channel's start
    at the front (its retried head keeps its place and goes first), and a lease given back behind
    that point on another channel comes after the next one, without waiting for the scan from
    the front."""
    setup, conn = connect(), connect(autocommit=False)
    scalar("SELECT lonnymq_configure_channel_v4(%s, 'acme', 1)", [Q], conn=setup)
    scalar("SELECT lonnymq_order_channel_v1(%s, 'acme', true)", [Q], conn=setup)
    first = enqueue_sql(Q, channel="acme", conn=setup)
    second = enqueue_sql(Q, channel="acme", conn=setup)
    f1 = enqueue_sql(Q, channel="free", conn=setup)
    f2 = enqueue_sql(Q, channel="free", conn=setup)
    now = int(scalar("SELECT lonnymq_now_ms_v1()", conn=conn))
    _set_ready_state(conn, str(now + 60_000))

    def call(batch: int = 1) -> list[dict[str, Any]]:
        got = dequeue(Q, batch=batch, conn=conn)
        conn.commit()
        return got

    got = call(batch=2)  # a round: one message of each channel
    assert sorted(r["id"] for r in got) == sorted([first, f1])
    acme = next(r for r in got if r["id"] == first)
    assert fail(acme, retry_delay_ms=300, conn=conn) == "retry"
    free = next(r for r in got if r["id"] == f1)
    assert release([free], conn=conn) == [f1]  # back behind where free's scans start
    conn.commit()
    time.sleep(0.35)
    after: list[dict[str, Any]] = []
    for _ in range(4):
        after += call(batch=10)
    order = [r["id"] for r in after]
    # The retried head again (its lease holds the channel's one slot until it ends).
    assert [i for i in order if i in (first, second)] == [first], order
    assert f2 in order and f1 in order and order.index(f2) < order.index(f1), order
    assert _ready_state(conn) is not None, "the calls above started after the taken"
    _set_ready_state(conn, "")


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_while_the_mark_holds_the_held_path_and_next_due_start_there_and_a_locked_queue_keeps_it(
    connect: Any,
) -> None:
    """Migration 0060: the session's other reads of the eligible index (the dequeue of due
    channels another session holds, the earliest turn an idle worker sleeps until) start at
    its mark too; and a scan from the front that finds every due channel held keeps the mark,
    so the next call does not read the front again."""
    setup, holder, other, conn = connect(), connect(), connect(autocommit=False), connect(autocommit=False)
    _fill(setup)
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1")  # the snapshot: VACUUM can remove nothing written after it
    worker = Dequeuer(conn)
    while worker.state() is None:
        got, _, _ = worker.call()
        assert got, "the backlog ran out before the dequeue scanned from a mark"
    _, mark = worker.state() or (0, 0)

    def next_due_read() -> tuple[int, int]:
        before = int(scalar(ENTRIES_READ, conn=conn))
        due = int(scalar("SELECT lonnymq_next_due_v1(ARRAY[%s])", [Q], conn=conn))
        read = int(scalar(ENTRIES_READ, conn=conn)) - before
        conn.commit()
        return due, read

    def held_read() -> tuple[int, int]:
        before = int(scalar(ENTRIES_READ, conn=conn))
        leased = rows(
            "SELECT * FROM lonnymq_dequeue_held_v1(%s, 100, lonnymq_now_ms_v1(), 30000, 'test', gen_random_uuid())",
            [Q],
            conn=conn,
        )
        read = int(scalar(ENTRIES_READ, conn=conn)) - before
        conn.rollback()  # nothing leased stays
        return len(leased), read

    worker.hold_mark(mark)
    due_from_mark, next_due_from_mark = next_due_read()
    held_from_mark = held_read()
    worker._set_state("")
    due_from_front, next_due_from_front = next_due_read()
    held_from_front = held_read()
    # The same earliest turn (no channel's turn lies before the mark), past the held entries.
    assert due_from_mark == due_from_front
    assert next_due_from_front > 5000 and next_due_from_mark * 5 < next_due_from_front
    assert held_from_mark[0] == held_from_front[0] == 100
    assert held_from_front[1] > 5000 and held_from_mark[1] * 5 < held_from_front[1]
    # Nothing due from the mark (a mark past every turn): next_due looks from the front.
    worker.hold_mark(int(scalar("SELECT lonnymq_now_ms_v1()", conn=setup)) + 10**9)
    assert next_due_read()[0] == due_from_front

    # Every channel held by another session: a call from the mark finds none, and its scan
    # from the front none it can lock; the mark stays (the held path serves the call).
    worker.hold_mark(mark)
    worker.scan_from_front_next()
    other.execute("SELECT 1 FROM lonnymq_channel WHERE queue = %s FOR NO KEY UPDATE", [Q])
    got, read, now = worker.call()
    assert read > 5000, "the call scanned from the front"
    state = worker.state()
    assert state is not None and state[1] == mark and state[0] > now, state
    other.rollback()
    assert len(got) == 100, "the held path served the call"
    holder.execute("COMMIT")


SHARED = "SELECT front_at, mark FROM lonnymq_eligible_mark WHERE queue = %s"
MARK_LOCK = "SELECT pg_advisory_lock(lonnymq_mark_lock_ns_v1(), hashtext(%s))"


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_the_queue_s_sessions_share_the_scan_from_the_front(connect: Any) -> None:
    """Migration 0061: a session whose mark is due for a scan from the front takes the mark
    another session wrote after its own scan, while that holds; else the one session that gets
    the queue's advisory lock scans and writes, and the others start at their marks meanwhile."""
    setup, holder, locker = connect(), connect(), connect()
    a, b = Dequeuer(connect(autocommit=False)), Dequeuer(connect(autocommit=False))
    _fill(setup)
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1")  # the snapshot: VACUUM can remove nothing written after it

    # A's scans from the front read more and more, until one writes its mark for the queue.
    while a.state() is None:
        got, _, _ = a.call()
        assert got, "the backlog ran out before the dequeue scanned from a mark"
    shared = rows(SHARED, [Q], conn=setup)
    assert [(r["front_at"], r["mark"]) for r in shared] == [a.state()]

    # B's own mark is due: it takes A's (and its time) instead of scanning from the front.
    # (A's time moved a minute away, so however slow the machine B's call runs before it.)
    front_at = int(scalar("SELECT lonnymq_now_ms_v1()", conn=setup)) + 60_000
    setup.execute("UPDATE lonnymq_eligible_mark SET front_at = %s WHERE queue = %s", [front_at, Q])
    b._set_state(f"0 {shared[0]['mark'] - 1}")
    got, read, now = b.call()
    assert len(got) == 100 and read < 5000, read
    state = b.state()
    assert state is not None and state[0] == front_at and state[1] >= shared[0]["mark"]

    # The queue's mark is due too, and another session holds the queue's lock (it scans from
    # the front now): B starts at its own mark and writes nothing.
    setup.execute("UPDATE lonnymq_eligible_mark SET front_at = 0 WHERE queue = %s", [Q])
    locker.execute(MARK_LOCK, [Q])
    b._set_state(f"0 {state[1]}")
    got, read, now = b.call()
    assert len(got) == 100 and read < 5000, read
    assert rows(SHARED, [Q], conn=setup)[0]["front_at"] == 0
    # The lock is free: B is the one that scans from the front, and writes what it found.
    locker.execute("SELECT pg_advisory_unlock_all()")
    b._set_state(f"0 {state[1]}")
    got, read, now = b.call()
    assert len(got) == 100 and read > 5000, read
    assert [(r["front_at"], r["mark"]) for r in rows(SHARED, [Q], conn=setup)] == [b.state()]

    # The snapshot ends and VACUUM removes the dead entries: the next scan from the front reads
    # few, and the queue's mark goes with the session's.
    holder.execute("COMMIT")
    setup.execute("VACUUM lonnymq_channel")
    b.scan_from_front_next()
    got, read, _ = b.call()
    assert got and read <= 5000 + 10 * 100
    assert b.state() is None and rows(SHARED, [Q], conn=setup) == []
    # Every message once, across both sessions.
    while a.call()[0] or b.call()[0]:
        pass
    assert sorted(a.delivered + b.delivered) == sorted(set(a.delivered + b.delivered))
    assert rows("SELECT * FROM lonnymq_check_v2(0)", conn=setup) == []


READY_SHARED = "SELECT until FROM lonnymq_ready_mark WHERE queue = %s"
READY_LOCK = "SELECT pg_advisory_lock(lonnymq_ready_lock_ns_v1(), hashtext(%s))"


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_the_queue_s_sessions_share_the_candidates_scan_from_the_front(connect: Any) -> None:
    """Migration 0062: the time until which candidate scans start after the taken is shared as
    the eligible mark is (0061): a session due for a scan from the front takes the time another
    wrote after its own, else the one that gets the queue's advisory lock scans and writes."""
    setup, holder, locker = connect(), connect(), connect()
    a, b = connect(autocommit=False), connect(autocommit=False)
    total = 3000
    named(
        "enqueue_many", setup, queue=Q, channels=["deep"] * total, payloads=["{}"] * total, run_at_ms=None,
        delay_ms=None, priorities=None, dedup_keys=None, on_duplicate=None, max_attempts=None,
        default_max_attempts=5, priority_step_ms=1000, tolerance_ms=50, costs=None, slots=None,
    )
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1")  # the snapshot: VACUUM can remove nothing written after it
    delivered: list[int] = []

    def call(conn: Any) -> tuple[int, int, int]:
        before = int(scalar(READY_ENTRIES_READ, conn=conn))
        now = int(scalar("SELECT lonnymq_now_ms_v1()", conn=conn))
        got = dequeue(Q, batch=100, conn=conn)
        read = int(scalar(READY_ENTRIES_READ, conn=conn)) - before
        if got:
            ack(got, conn=conn)
        conn.commit()
        delivered.extend(r["id"] for r in got)
        return len(got), read, now

    while _ready_state(a) is None:
        assert call(a)[0] == 100, "the backlog ran out before the scans started after the taken"
    assert [r["until"] for r in rows(READY_SHARED, [Q], conn=setup)] == [int(_ready_state(a) or 0)]

    # B is due for a scan from the front: it takes A's time instead. (A's time moved a minute
    # away, so however slow the machine B's call runs before it.)
    until = int(scalar("SELECT lonnymq_now_ms_v1()", conn=setup)) + 60_000
    setup.execute("UPDATE lonnymq_ready_mark SET until = %s WHERE queue = %s", [until, Q])
    _set_ready_state(b, "0")
    got, read, now = call(b)
    assert got == 100 and read <= 100 + 10, read
    assert int(_ready_state(b) or 0) == until

    # The queue's time has passed too and another session holds the queue's lock: B starts
    # after the taken and writes nothing; once the lock is free, B scans from the front.
    setup.execute("UPDATE lonnymq_ready_mark SET until = 0 WHERE queue = %s", [Q])
    locker.execute(READY_LOCK, [Q])
    _set_ready_state(b, "0")
    got, read, _ = call(b)
    assert got == 100 and read <= 100 + 10, read
    assert [r["until"] for r in rows(READY_SHARED, [Q], conn=setup)] == [0]
    locker.execute("SELECT pg_advisory_unlock_all()")
    got, read, _ = call(b)
    assert got == 100 and read > 1000, read
    assert [r["until"] for r in rows(READY_SHARED, [Q], conn=setup)] == [int(_ready_state(b) or 0)]

    # Released and vacuumed: the next scan from the front reads few, and the queue's time goes.
    holder.execute("COMMIT")
    setup.execute("VACUUM lonnymq_message")
    _set_ready_state(b, "0")
    setup.execute("UPDATE lonnymq_ready_mark SET until = 0 WHERE queue = %s", [Q])
    got, read, _ = call(b)
    assert got == 100 and read <= 100 + 10, read
    assert _ready_state(b) is None and rows(READY_SHARED, [Q], conn=setup) == []
    while call(a)[0] or call(b)[0]:
        pass
    assert sorted(delivered) == sorted(set(delivered)) and len(delivered) == total
    assert rows("SELECT * FROM lonnymq_check_v2(0)", conn=setup) == []
