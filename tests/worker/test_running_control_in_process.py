"""The SQL side of running messages under control: cancelling a running message (a mark the
heartbeat returns), dead-letter reasons 'timeout' and 'cancelled', a marked message never
going back to ready (retry, release, expired lease), unknown ids refused."""

from __future__ import annotations

import time

import pytest
from django.db import transaction

from django_lonnymq import api, enqueue
from django_lonnymq.exceptions import InvalidArgument, MessageNotFound, UnknownMessage
from tests.harness.helpers import (
    ack,
    assert_healthy,
    channel_row,
    configure,
    dead_row,
    dequeue,
    fail,
    heartbeat,
    message_row,
    reap,
    release,
)

pytestmark = pytest.mark.django_db


def test_cancel_marks_a_running_message_and_the_heartbeat_returns_the_mark():
    message_id = enqueue("ctl", {"n": 1})
    [row] = dequeue("ctl")
    assert heartbeat([row], 30_000) == {message_id: False}
    assert api.cancel([message_id]) == [message_id]
    assert heartbeat([row], 30_000) == {message_id: True}
    assert message_row(message_id)["lease_token"] == row["lease_token"]  # still its worker's
    assert api.cancel([message_id]) == [message_id]  # cancelling twice is harmless


def test_cancel_rows_tell_waiting_from_running():
    waiting = enqueue("ctl", "w", delay=3600)
    running = enqueue("ctl", "r")
    dequeue("ctl")
    assert api.cancel_rows([running, waiting, waiting]) == [(waiting, False), (running, True)]
    assert message_row(waiting) is None


@pytest.mark.parametrize("cancelled", [[123456789], [123456789, 987654321]])
def test_cancel_of_an_unknown_id_is_refused_and_cancels_nothing(cancelled):
    waiting = enqueue("ctl", "w")
    with pytest.raises(UnknownMessage) as caught, transaction.atomic():
        api.cancel([waiting, *cancelled])
    assert caught.value.ids == sorted(cancelled)
    assert caught.value.field == "ids"
    assert isinstance(caught.value, MessageNotFound) and isinstance(caught.value, InvalidArgument)
    assert str(cancelled[0]) in str(caught.value) and "nothing was cancelled" in str(caught.value)
    assert message_row(waiting) is not None


def test_cancel_of_many_unknown_ids_gives_their_count_and_the_first_20_but_keeps_every_id():
    waiting = enqueue("ctl", "w")
    unknown = list(range(10**12, 10**12 + 200_000))
    with pytest.raises(UnknownMessage) as caught, transaction.atomic():
        api.cancel([*reversed(unknown), waiting])
    text = str(caught.value)
    first = ", ".join(map(str, unknown[:20]))
    assert text == (
        "cannot cancel 200000 message(s): not found (never enqueued, or already acked, cancelled or dead); "
        f"nothing was cancelled: {first} and 199980 more"
    )
    assert caught.value.ids == unknown
    # The database's own message is as short; its DETAIL lists every id, for the attribute.
    refused = caught.value.__cause__.__cause__
    assert refused.sqlstate == "LQ170" and len(refused.diag.message_primary) < 600
    assert refused.diag.message_primary.endswith(f"nothing was cancelled: {first} and 199980 more")
    assert refused.diag.message_detail == ",".join(map(str, unknown))
    assert message_row(waiting) is not None


def test_cancel_of_a_few_unknown_ids_names_them_all():
    with pytest.raises(UnknownMessage) as caught, transaction.atomic():
        api.cancel([7_000_000_003, 7_000_000_001])
    assert str(caught.value).endswith("nothing was cancelled: 7000000001, 7000000003")
    assert "2 message(s)" in str(caught.value) and "more" not in str(caught.value)


def test_cancel_of_a_finished_message_is_refused():
    message_id = enqueue("ctl", "done")
    ack(dequeue("ctl"))
    with pytest.raises(UnknownMessage), transaction.atomic():
        api.cancel([message_id])
    assert api.cancel([message_id], missing_ok=True) == []


def test_failing_a_cancelled_message_dead_letters_it_as_cancelled_and_frees_its_slot():
    configure("ctl", "capped", max_concurrency=1)
    message_id = enqueue("ctl", "x", channel="capped", max_attempts=5)
    [row] = dequeue("ctl")
    assert channel_row("ctl", "capped")["in_flight"] == 1
    api.cancel([message_id])
    # Whatever the worker reports (a plain failure here), a cancelled message does not retry.
    assert fail(row, "interrupted", reason="failed") == "dead"
    dead = dead_row(message_id)
    assert dead["reason"] == "cancelled" and dead["last_error"] == "interrupted"
    assert channel_row("ctl", "capped")["in_flight"] == 0
    assert_healthy()
    # requeue brings it back, unmarked
    assert api.requeue_dead([message_id]) == [message_id]
    assert message_row(message_id)["cancel_requested"] is False


def test_the_worker_reports_cancelled():
    message_id = enqueue("ctl", "x", max_attempts=5)
    [row] = dequeue("ctl")
    assert fail(row, "cancelled while running", reason="cancelled") == "dead"
    assert dead_row(message_id)["reason"] == "cancelled"


def test_a_timeout_retries_then_dead_letters_with_reason_timeout():
    message_id = enqueue("ctl", "slow", max_attempts=2)
    [row] = dequeue("ctl")
    assert fail(row, "timed out after 1s", reason="timeout", retry_delay_ms=0) == "retry"
    assert message_row(message_id)["last_error"] == "timed out after 1s"
    [row] = dequeue("ctl")
    assert row["attempts"] == 2
    assert fail(row, "timed out after 1s", reason="timeout") == "dead"
    dead = dead_row(message_id)
    assert (dead["reason"], dead["attempts"]) == ("timeout", 2)
    assert_healthy()


@pytest.mark.parametrize("reason", ["bogus", None, "lease_expired", ""])
def test_fail_refuses_an_unknown_reason(reason):
    enqueue("ctl", "x")
    [row] = dequeue("ctl")
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        fail(row, "e", reason=reason) if reason is not None else _fail_null_reason(row)
    assert caught.value.field == "reason"
    assert message_row(row["id"])["lease_token"] == row["lease_token"]


def _fail_null_reason(row):
    from tests.harness.helpers import named

    return named(
        "fail",
        id=row["id"],
        token=row["lease_token"],
        error="e",
        retry_delay_ms=None,
        reason=None,
        backoff_base_ms=0,
        backoff_max_ms=0,
        tolerance_ms=50,
    )


def test_a_cancelled_message_released_on_shutdown_is_dead_not_ready():
    message_id = enqueue("ctl", "x")
    [row] = dequeue("ctl")
    api.cancel([message_id])
    assert release([row]) == [message_id]
    assert message_row(message_id) is None
    assert dead_row(message_id)["reason"] == "cancelled"
    assert_healthy()


def test_a_cancelled_message_whose_lease_expires_is_dead_not_redelivered():
    configure("ctl", "capped", max_concurrency=1)
    message_id = enqueue("ctl", "x", channel="capped", max_attempts=5)
    [row] = dequeue("ctl", lease_ms=50)
    api.cancel([message_id])
    time.sleep(0.1)
    assert reap() == 1
    assert message_row(message_id) is None
    assert dead_row(message_id)["reason"] == "cancelled"
    assert channel_row("ctl", "capped")["in_flight"] == 0
    assert dequeue("ctl") == []
    assert_healthy()
