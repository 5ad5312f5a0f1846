"""A channel's identity lives in lonnymq_channel_key (migration 0059), a row written once.

Every dequeue rewrites the rows of the channels it visits, and while a snapshot holds the
horizon back each rewrite's entry in a unique index was checked against every version of the
row the snapshot keeps. lonnymq_channel has plain indexes now; its unique (queue, name) and
the id dead messages refer to are the key's, which every way of creating or removing a
channel keeps in step with it (lonnymq_check_v2 proves it).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction

from django_lonnymq.models import Channel
from tests.harness.helpers import dequeue, enqueue_sql, fail, rows, scalar

pytestmark = pytest.mark.django_db(transaction=True)

Q = "keyed"


def _keys(conn: Any = None) -> dict[int, tuple[str, str]]:
    return {r["id"]: (r["queue"], r["name"]) for r in rows("SELECT * FROM lonnymq_channel_key", conn=conn)}


def _channels(conn: Any = None) -> dict[int, tuple[str, str]]:
    return {
        r["id"]: (r["queue"], r["name"])
        for r in rows("SELECT id, queue, name FROM lonnymq_channel", conn=conn)
    }


def _problems(conn: Any = None) -> list[dict[str, Any]]:
    return rows("SELECT * FROM lonnymq_check_v2(0) WHERE problem = 'channel_key_mismatch'", conn=conn)


def test_the_channel_table_has_no_unique_index() -> None:
    unique = rows(
        "SELECT i.indexrelid::regclass::text AS name FROM pg_index i"
        " WHERE i.indrelid = 'lonnymq_channel'::regclass AND (i.indisunique OR i.indisexclusion)"
    )
    assert unique == []
    assert (
        scalar(
            "SELECT count(*) FROM pg_index WHERE indrelid = 'lonnymq_channel_key'::regclass AND indisunique"
        )
        == 2
    )


def test_every_way_of_creating_a_channel_writes_its_key_and_a_taken_name_fails() -> None:
    enqueue_sql(Q, channel="by-enqueue")
    Channel.objects.create(queue=Q, name="by-orm")
    assert _keys() == _channels()
    assert sorted(name for _, name in _keys().values()) == ["by-enqueue", "by-orm"]

    # A name that is taken fails as the unique violation of the key's (queue, name), before
    # anything is written.
    with pytest.raises(IntegrityError, match="lonnymq_channel_key_queue_name_uniq"), transaction.atomic():
        Channel.objects.create(queue=Q, name="by-orm")
    # An id that is another channel's fails too (a hand-written INSERT).
    taken = next(iter(_keys()))
    with pytest.raises(IntegrityError, match="belongs to another channel"), transaction.atomic():
        Channel.objects.create(id=taken, queue=Q, name="elsewhere")
    assert len(_channels()) == 2 and _keys() == _channels()
    assert _problems() == []


def test_a_deleted_or_truncated_channel_takes_its_key_and_its_dead_messages_keep_theirs(
    connect: Any,
) -> None:
    conn = connect()
    message = enqueue_sql(Q, channel="dies", conn=conn)
    leased = dequeue(Q, conn=conn)
    assert [r["id"] for r in leased] == [message]
    assert fail(leased[0], discard=True, conn=conn) == "dead"
    channel_id = int(
        scalar("SELECT channel_id FROM lonnymq_dead_message WHERE id = %s", [message], conn=conn)
    )
    assert channel_id in _keys(conn)

    assert scalar("SELECT lonnymq_delete_channel_v1(%s)", [channel_id], conn=conn) == "deleted"
    assert channel_id not in _keys(conn)
    # The dead message stays, without its channel's id (the foreign key's ON DELETE SET NULL).
    assert scalar("SELECT channel_id FROM lonnymq_dead_message WHERE id = %s", [message], conn=conn) is None

    enqueue_sql(Q, channel="a", conn=conn)
    enqueue_sql(Q, channel="b", conn=conn)
    assert len(_keys(conn)) == 2
    conn.execute("TRUNCATE lonnymq_message, lonnymq_channel, lonnymq_wake")
    assert _keys(conn) == {}
    # A channel of the same name is created again, with a new key.
    enqueue_sql(Q, channel="a", conn=conn)
    assert list(_keys(conn).values()) == [(Q, "a")] and _keys(conn) == _channels(conn)


def test_the_check_reports_a_channel_and_a_key_that_disagree(connect: Any) -> None:
    enqueue_sql(Q, channel="kept", conn=connect())
    (channel_id,) = _channels()
    conn = connect(autocommit=False)
    # Each by hand, past the functions and the triggers (rolled back): the check says which.
    conn.execute("ALTER TABLE lonnymq_channel DISABLE TRIGGER USER")
    conn.execute("INSERT INTO lonnymq_channel_key (queue, name) VALUES (%s, 'stray')", [Q])
    conn.execute("INSERT INTO lonnymq_channel (id, queue, name) VALUES (%s, %s, 'twin')", [channel_id, Q])
    found = sorted((p["channel_id"] == channel_id, p["detail"]) for p in _problems(conn))
    conn.rollback()
    assert found == [
        (False, "a row of lonnymq_channel_key without its channel"),
        (True, "2 channel rows have this id"),
    ], found
    conn.execute("DELETE FROM lonnymq_channel_key WHERE id = %s", [channel_id])
    assert [(p["channel"], p["detail"]) for p in _problems(conn)] == [
        ("kept", "the channel has no row in lonnymq_channel_key")
    ]
    conn.execute("UPDATE lonnymq_channel SET name = 'renamed' WHERE id = %s", [channel_id])
    conn.execute("INSERT INTO lonnymq_channel_key (id, queue, name) VALUES (%s, %s, 'kept')", [channel_id, Q])
    assert [(p["channel"], p["detail"]) for p in _problems(conn)] == [("renamed", f"its key names {Q}/kept")]
    conn.rollback()
    assert _problems() == []


BLOCKS_FETCHED = "SELECT pg_stat_get_xact_blocks_fetched('lonnymq_channel'::regclass)"


def test_under_a_held_snapshot_a_channel_s_rewrite_reads_none_of_its_old_versions(connect: Any) -> None:
    """What step 5 of every dequeue does to each channel it visits: a non-HOT rewrite of its
    row (its turn moves in the eligible index), found by tid. With a unique index on the
    table, each rewrite fetched every version of the row the snapshot keeps."""
    setup, holder = connect(), connect()
    conn = connect(autocommit=False)
    enqueue_sql(Q, channel="busy", conn=setup)
    holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1")  # the snapshot: VACUUM can remove nothing written after it
    rewrite = (
        "UPDATE lonnymq_channel SET turn = turn + 1, next_dequeue_at = coalesce(next_dequeue_at, 0) + 1"
        " WHERE ctid = %s::tid RETURNING ctid::text"
    )
    tid = str(scalar("SELECT ctid::text FROM lonnymq_channel WHERE queue = %s", [Q], conn=setup))
    for _ in range(300):
        tid = str(scalar(rewrite, [tid], conn=setup))
    before = int(scalar(BLOCKS_FETCHED, conn=conn))
    tid = str(scalar(rewrite, [tid], conn=conn))
    fetched = int(scalar(BLOCKS_FETCHED, conn=conn)) - before
    conn.commit()
    # The row's own version and the page the new one goes to, of the 300 the snapshot keeps.
    assert fetched <= 10, fetched
