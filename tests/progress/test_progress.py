"""message.progress() and api.message_status in eager mode and against the SQL functions:
reports are stored apart from the message and kept after its ack, bad values are refused with
a typed error before anything is written (in Python and by the schema), the signal carries
each report, and old rows of finished messages are pruned."""

from __future__ import annotations

import math

import pytest
from asgiref.sync import async_to_sync
from django.db import IntegrityError, connection, transaction

from django_lonnymq import Message, api, enqueue, handler, statements
from django_lonnymq.exceptions import InvalidArgument, NotInHandler
from django_lonnymq.message import Message as MessageClass
from django_lonnymq.progress import Progress
from django_lonnymq.registry import unregister
from django_lonnymq.signals import message_progress
from django_lonnymq.testing import eager
from tests.harness.helpers import dequeue

pytestmark = pytest.mark.django_db
seen: list[object] = []


@pytest.fixture
def queue():
    seen.clear()
    names = []

    def register(name, fn):
        names.append(name)
        handler(name)(fn)

    yield register
    for name in names:
        unregister(name)


def _rows() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT message_id, queue, channel, done, total, note FROM lonnymq_progress ORDER BY 1")
        return list(cursor.fetchall())


def test_a_handler_reports_and_the_last_report_outlives_the_ack(queue):
    def export(message: Message) -> None:
        for done in range(0, 101, 25):
            message.progress(done, 100, note=f"rows {done}")
            status = api.message_status(message.id)
            seen.append((status.state, status.progress.done, status.progress.percent))

    queue("p_export", export)
    with eager():
        msg = enqueue("p_export", {}, channel="tenant-1")
    # Eager mode writes each report at once: the handler read its own reports back, running.
    assert seen == [("running", 0.0, 0), ("running", 25.0, 25), ("running", 50.0, 50),
                    ("running", 75.0, 75), ("running", 100.0, 100)]  # fmt: skip
    status = api.message_status(msg)
    assert status.state == "finished" and status.queue == "p_export" and status.channel == "tenant-1"
    assert status.progress.done == 100 and status.progress.total == 100 and status.progress.note == "rows 100"
    assert status.progress.fraction == 1.0 and status.progress.updated_at is not None
    assert _rows() == [(msg, "p_export", "tenant-1", 100.0, 100.0, "rows 100")]


def test_message_status_follows_a_message_through_its_states():
    msg = enqueue("p_states", {"n": 1}, max_attempts=25)
    status = api.message_status(msg)
    assert (status.state, status.attempts, status.max_attempts, status.progress) == ("ready", 0, 25, None)
    later = enqueue("p_states", {"n": 2}, delay=3600)
    assert api.message_status(later).state == "scheduled"
    [leased] = dequeue("p_states", batch=1)
    assert leased["id"] == msg and api.message_status(msg).state == "running"
    api.cancel([later])  # a waiting message is deleted at once: the queue knows nothing of it
    assert api.message_status(later) is None
    api.cancel([msg])  # a running one is marked; the fail below buries it as cancelled
    statements.fail(
        id=msg, token=str(leased["lease_token"]), error="boom", backoff_base_ms=0, backoff_max_ms=0,
        retry_delay_ms=None, reason="cancelled", tolerance_ms=50,
    )  # fmt: skip
    status = api.message_status(msg)
    assert (status.state, status.attempts, status.last_error) == ("dead", 1, "boom")


def test_without_a_total_only_done_is_known(queue):
    def count(message: Message) -> None:
        message.progress(7, note="seven so far")

    queue("p_open", count)
    with eager():
        msg = enqueue("p_open", {})
    progress = api.message_status(msg).progress
    assert progress == Progress(7.0, None, "seven so far", progress.updated_at)
    assert progress.fraction is None and progress.percent is None


@pytest.mark.parametrize(
    ("args", "field", "rule"),
    [
        ((math.nan, 10), "done", "must be a finite number"),
        ((math.inf,), "done", "must be a finite number"),
        ((-1, 10), "done", "must not be negative"),
        ((11, 10), "done", "must be at most total (10)"),
        ((1, 0), "total", "must be above 0"),
        ((1, math.nan), "total", "must be a finite number"),
        (("3", 10), "done", "must be a number"),
        ((True, 10), "done", "must be a number"),
        ((1, 10**16), "total", "must be at most 1000000000000000"),
        ((1, 10, "x" * 201), "note", "must be at most 200 characters"),
        ((1, 10, "a\x00b"), "note", "must not contain NUL characters"),
        ((1, 10, 5), "note", "must be a string"),
    ],
)
def test_bad_reports_are_refused_by_name_and_record_nothing(queue, args, field, rule):
    def bad(message: Message) -> None:
        message.progress(1, 10, "fine so far")
        try:
            message.progress(*args)
        except InvalidArgument as exc:
            seen.append((exc.field, exc.rule))

    queue("p_bad", bad)
    with eager():
        msg = enqueue("p_bad", {})
    assert seen == [(field, rule)]
    assert api.message_status(msg).progress.note == "fine so far"  # the good report, untouched


@pytest.mark.parametrize(
    ("done", "total", "note", "field"),
    [
        ("NaN", "10", "", "done"),
        ("-1", "10", "", "done"),
        ("11", "10", "", "done"),
        ("1", "0", "", "total"),
        ("1", "Infinity", "", "total"),
        ("1", "10", "x" * 201, "note"),
    ],
)
def test_the_schema_refuses_the_same_values_with_a_typed_error(done, total, note, field):
    msg = enqueue("p_sql", {})
    with pytest.raises(InvalidArgument) as raised, transaction.atomic():
        statements.progress(
            ids=[msg], queues=["p_sql"], channels=["default"], done=[float(done)],
            totals=[float(total)], notes=[note],
        )  # fmt: skip
    assert raised.value.field == field
    assert _rows() == []
    # And the table's own CHECKs, for a writer that goes around the function.
    with pytest.raises(IntegrityError, match="lonnymq_progress_"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO lonnymq_progress VALUES (%s, 'p_sql', 'default', %s, %s, %s, 0)",
            [msg, float(done), float(total), note],
        )


def test_progress_outside_a_handler_says_where_it_works():
    message = MessageClass(1, "q", "c", {}, 1, 1, enqueued_at=None)  # type: ignore[arg-type]
    with pytest.raises(NotInHandler, match="progress work only inside a handler"):
        message.progress(1, 2)


def test_the_signal_carries_every_report_and_async_handlers_report_too(queue):
    def receiver(sender, message, done, total, note, **kwargs):
        seen.append((sender, message.queue, done, total, note))

    async def async_export(message: Message) -> None:
        await message.aprogress(1, 2, "half")
        await message.aprogress(2, 2, "all")

    queue("p_async", async_export)
    message_progress.connect(receiver)
    try:
        with eager():
            msg = enqueue("p_async", {})
    finally:
        message_progress.disconnect(receiver)
    assert seen == [(MessageClass, "p_async", 1.0, 2.0, "half"), (MessageClass, "p_async", 2.0, 2.0, "all")]
    assert api.message_status(msg).progress.note == "all"


def test_a_message_reported_twice_in_one_call_keeps_its_last_report():
    msg = enqueue("p_twice", {})
    written = statements.progress(
        ids=[msg, msg], queues=["p_twice"] * 2, channels=["default"] * 2, done=[1.0, 2.0],
        totals=[None, None], notes=["first", "last"],
    )  # fmt: skip
    assert written == 1 and _rows() == [(msg, "p_twice", "default", 2.0, None, "last")]


def test_the_prune_deletes_old_rows_of_gone_messages_only():
    waiting = enqueue("p_prune", {})
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO lonnymq_progress VALUES (%s, 'p_prune', 'default', 1, NULL, '', 0),"
            " (%s, 'p_prune', 'default', 1, NULL, '', 0), (%s, 'p_prune', 'default', 1, NULL, '',"
            " lonnymq_now_ms_v1())",
            [waiting, 2**61, 2**61 + 1],
        )
    assert statements.progress_prune(retention_ms=60_000, limit=1000) == 1
    assert [r[0] for r in _rows()] == [waiting, 2**61 + 1]  # still waiting; gone but recent
    with pytest.raises(InvalidArgument), transaction.atomic():
        statements.progress_prune(retention_ms=-1, limit=10)


def test_message_status_refuses_a_bad_id():
    for bad in ("1", 0, True, 2**63):
        with pytest.raises(InvalidArgument, match="message_id"):
            api.message_status(bad)  # type: ignore[arg-type]


def test_async_progress_runs_from_an_event_loop(queue):
    async def report(message: Message) -> None:
        await message.aprogress(3, 3)

    queue("p_async2", report)
    with eager():
        msg = async_to_sync(api.aenqueue)("p_async2", {})
    assert api.message_status(msg).progress.done == 3.0
