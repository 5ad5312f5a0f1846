"""A channel another dequeuer holds: a second dequeue still leases its messages when the
channel has no limit (lonnymq_dequeue_held_v1), and never when it has one.

The holder is a dequeue inside an open transaction: it keeps the channel row locked, as a
worker's dequeue does for the length of its statement.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.harness.helpers import (
    ack,
    channel_row,
    configure,
    dequeue,
    enqueue_sql,
    reap,
    release,
    rows,
    scalar,
)

pytestmark = pytest.mark.django_db(transaction=True)

Q = "held"


def _fill(conn: Any, n: int, channel: str = "default") -> list[int]:
    return [enqueue_sql(Q, f'{{"n": {i}}}', channel=channel, conn=conn) for i in range(n)]


def _released_total(conn: Any) -> int:
    return int(scalar("SELECT released_total FROM lonnymq_queue_stats_v1(ARRAY[%s])", [Q], conn))


def test_a_held_channel_without_limits_is_served_by_a_second_dequeuer(connect: Any) -> None:
    setup, holder, other = connect(), connect(autocommit=False), connect()
    ids = _fill(setup, 10)
    first = dequeue(Q, batch=3, conn=holder)  # holds the channel row until it commits
    assert [r["id"] for r in first] == ids[:3]

    second = dequeue(Q, batch=3, conn=other)
    # The next ready messages in FIFO order, none of the holder's.
    assert [r["id"] for r in second] == ids[3:6]
    assert {r["channel"] for r in second} == {"default"}
    # Counted away from the row (the holder's transaction still holds it).
    assert rows(
        "SELECT released FROM lonnymq_release_count WHERE backend = pg_backend_pid()", conn=other
    ) == [{"released": 3}]
    holder.commit()
    assert channel_row(Q, conn=setup)["released_total"] == 3
    assert _released_total(setup) == 6

    rest = dequeue(Q, batch=10, conn=setup)
    assert [r["id"] for r in rest] == ids[6:]
    assert sorted(ack(first + second + rest, conn=setup)) == sorted(ids)
    assert dequeue(Q, batch=10, conn=setup) == []
    assert rows("SELECT * FROM lonnymq_check_v2(0)", conn=setup) == []


def test_a_second_dequeuer_splits_its_batch_round_robin_over_held_channels(connect: Any) -> None:
    setup, holder_a, holder_b, other = connect(), connect(False), connect(False), connect()
    fifo = {"a": _fill(setup, 5, "a"), "b": _fill(setup, 5, "b")}
    # Both channels due on their committed rows (the marks applied), first messages back.
    release(dequeue(Q, batch=2, conn=setup), conn=setup)
    first = dequeue(Q, conn=holder_a)[0]["channel"]
    second = dequeue(Q, conn=holder_b)[0]["channel"]
    assert {first, second} == {"a", "b"}

    got = dequeue(Q, batch=4, conn=other)
    channels = [r["channel"] for r in got]
    assert channels[0] != channels[1] and channels == channels[:2] * 2, channels
    for name in ("a", "b"):
        assert [r["id"] for r in got if r["channel"] == name] == fifo[name][1:3]
    holder_a.commit()
    holder_b.commit()


def test_a_weighted_channel_without_limits_is_served_too(connect: Any) -> None:
    setup, holder, other = connect(), connect(autocommit=False), connect()
    configure(Q, "default", weight=3, conn=setup)
    ids = _fill(setup, 10)
    assert [r["id"] for r in dequeue(Q, conn=holder)] == ids[:1]
    assert [r["id"] for r in dequeue(Q, batch=4, conn=other)] == ids[1:5]
    holder.commit()


@pytest.mark.parametrize(
    "limits",
    [
        {"max_concurrency": 100},
        {"release_interval_ms": 1},
        {"rate": (1000, 1000, 1000)},
        {"paused": True},
    ],
    ids=["capped", "release-interval", "token-bucket", "paused"],
)
def test_a_held_channel_with_a_limit_is_never_served_without_its_row(connect: Any, limits: dict) -> None:
    setup, holder, other = connect(), connect(autocommit=False), connect()
    configure(Q, "default", conn=setup, **limits)
    _fill(setup, 10)
    if not limits.get("paused"):
        assert len(dequeue(Q, conn=holder)) == 1
    else:
        rows("SELECT 1 FROM lonnymq_channel WHERE queue = %s FOR NO KEY UPDATE", [Q], conn=holder)
    assert dequeue(Q, batch=5, conn=other) == []
    holder.commit()


def test_a_new_limit_waits_for_leases_taken_without_the_row_and_counts_them(connect: Any) -> None:
    setup, holder, other, admin = connect(), connect(False), connect(False), connect()
    _fill(setup, 10)
    held = dequeue(Q, batch=2, conn=holder)
    stolen = dequeue(Q, batch=3, conn=other)  # open transaction: leases not committed yet
    assert len(held) == 2 and len(stolen) == 3
    holder.commit()

    done = threading.Event()

    def set_cap() -> None:
        configure(Q, "default", max_concurrency=4, conn=admin)
        done.set()

    thread = threading.Thread(target=set_cap)
    thread.start()
    # The configure waits on the lease lock the second dequeuer holds shared.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        waiting = scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = %s",
            [admin.info.backend_pid],
            setup,
        )
        if waiting:
            break
        time.sleep(0.02)
    assert waiting == 1, "configure did not wait for the leases taken without the row"
    assert not done.is_set()
    other.commit()
    thread.join(timeout=10)
    assert done.is_set()
    # All five leases in flight are counted against the new cap of 4: nothing more is released.
    assert channel_row(Q, conn=setup)["in_flight"] == 5
    assert dequeue(Q, batch=5, conn=setup) == []
    ack(held + stolen, conn=setup)
    assert channel_row(Q, conn=setup)["in_flight"] == 0
    assert len(dequeue(Q, batch=5, conn=setup)) == 4


def test_the_reaper_folds_the_counts_of_backends_that_are_gone(connect: Any) -> None:
    setup, holder = connect(), connect(autocommit=False)
    _fill(setup, 6)
    dequeue(Q, batch=2, conn=holder)
    other = connect()
    dequeue(Q, batch=4, conn=other)
    holder.commit()
    assert _released_total(setup) == 6
    reap(conn=setup)  # the other backend is alive: its row stays
    assert scalar("SELECT count(*) FROM lonnymq_release_count", conn=setup) == 1
    other.close()
    deadline = time.monotonic() + 10
    while scalar("SELECT count(*) FROM lonnymq_release_count", conn=setup) and time.monotonic() < deadline:
        reap(conn=setup)  # the backend may take a moment to leave pg_stat_activity
        time.sleep(0.05)
    assert scalar("SELECT count(*) FROM lonnymq_release_count", conn=setup) == 0
    assert channel_row(Q, conn=setup)["released_total"] == 6
    assert _released_total(setup) == 6


def test_deleting_a_channel_drops_its_counts(connect: Any) -> None:
    setup, holder, other = connect(), connect(autocommit=False), connect()
    _fill(setup, 4)
    held = dequeue(Q, batch=2, conn=holder)
    stolen = dequeue(Q, batch=2, conn=other)
    holder.commit()
    ack(held + stolen, conn=setup)
    channel_id = channel_row(Q, conn=setup)["id"]
    assert scalar("SELECT lonnymq_delete_channel_v1(%s)", [channel_id], setup) == "deleted"
    assert scalar("SELECT count(*) FROM lonnymq_release_count", conn=setup) == 0
