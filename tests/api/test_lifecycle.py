"""A message's life after dequeue: ack, fail (backoff, dead letters), discard, requeue,
cancel, run_now, extend, release, reap; stale lease tokens."""

from __future__ import annotations

import time
import uuid

import pytest
from django.db import transaction

from django_lonnymq import api, enqueue, enqueue_many
from django_lonnymq.exceptions import InvalidArgument, LeaseLost, MessageNotFound, translate
from tests.harness.helpers import (
    LEASE_MS,
    ack,
    assert_healthy,
    channel_row,
    configure,
    db_now_ms,
    dead_row,
    dequeue,
    extend,
    fail,
    message_row,
    reap,
    release,
)

pytestmark = pytest.mark.django_db


def expire(lease_ms: int) -> None:
    """Wait until a lease of lease_ms taken just before has expired."""
    time.sleep(lease_ms / 1000 + 0.02)


# ---------------------------------------------------------------------------------------
# ack
# ---------------------------------------------------------------------------------------


def test_dequeue_leases_the_message_and_ack_deletes_it():
    message_id = enqueue("life", {"a": 1}, channel="c")
    before = db_now_ms()
    [row] = dequeue("life", lease_ms=30_000, worker="w-1")
    assert row["id"] == message_id and row["attempts"] == 1 and row["channel"] == "c"
    stored = message_row(message_id)
    assert stored["lease_token"] == row["lease_token"]
    assert before + 30_000 <= stored["lease_until"] <= db_now_ms() + 30_000
    assert stored["leased_by"] == "w-1"
    assert dequeue("life") == []  # a leased message is not released twice

    assert ack([row]) == [message_id]
    assert message_row(message_id) is None
    assert ack([row]) == []  # a double ack changes nothing
    assert_healthy()


def test_ack_of_many_ids_in_one_call_and_slots_come_back():
    configure("life", "c", max_concurrency=3)
    enqueue_many("life", [1, 2, 3], channel="c")
    got = dequeue("life", batch=3)
    assert channel_row("life", "c")["in_flight"] == 3
    assert ack(got) == sorted(r["id"] for r in got)
    assert channel_row("life", "c")["in_flight"] == 0
    assert_healthy()


def test_ack_with_a_wrong_token_acks_nothing():
    enqueue("life", "x")
    [row] = dequeue("life")
    forged = dict(row, lease_token=uuid.uuid4())
    assert ack([forged]) == []
    assert message_row(row["id"]) is not None


# ---------------------------------------------------------------------------------------
# fail: backoff, dead letters, retry delay, discard
# ---------------------------------------------------------------------------------------


def test_fail_backs_off_exponentially_then_dead_letters_with_the_last_error():
    configure("life", "c", max_concurrency=1)
    message_id = enqueue("life", {"job": "x"}, channel="c", max_attempts=4)
    delays = []
    for attempt in range(1, 4):
        [row] = dequeue("life")
        assert row["id"] == message_id and row["attempts"] == attempt
        before = db_now_ms()
        assert fail(row, f"error {attempt}", backoff_base_ms=1000) == "retry"
        after = db_now_ms()
        stored = message_row(message_id)
        assert stored["lease_until"] is None and stored["lease_token"] is None
        assert stored["attempts"] == attempt
        assert stored["last_error"] == f"error {attempt}"
        # Equal jitter: between half and all of base * 2 ** (attempt - 1).
        step = 1000 * 2 ** (attempt - 1)
        delay = stored["dequeue_at"] - before
        assert before + step // 2 <= stored["dequeue_at"] <= after + step, (attempt, delay)
        delays.append(stored["dequeue_at"] - before)
        assert channel_row("life", "c")["in_flight"] == 0
        assert dequeue("life") == []  # not before its backoff
        assert api.run_now([message_id]) == [message_id]
    assert delays == sorted(delays), f"backoff did not grow with attempts: {delays}"

    [row] = dequeue("life")
    assert row["attempts"] == 4
    assert fail(row, "final error") == "dead"
    assert message_row(message_id) is None
    dead = dead_row(message_id)
    assert dead is not None
    assert dead["reason"] == "failed"
    assert dead["last_error"] == "final error"
    assert dead["attempts"] == 4 and dead["max_attempts"] == 4
    assert (dead["queue"], dead["channel"]) == ("life", "c")
    assert dead["channel_id"] == channel_row("life", "c")["id"]
    assert dead["payload"] == {"job": "x"}
    assert channel_row("life", "c")["in_flight"] == 0
    assert dequeue("life") == []
    assert_healthy()


def test_backoff_is_capped_by_backoff_max():
    message_id = enqueue("life", "x", max_attempts=50)
    for _ in range(12):
        [row] = dequeue("life")
        before = db_now_ms()
        fail(row, backoff_base_ms=1000, backoff_max_ms=5000)
        assert message_row(message_id)["dequeue_at"] <= db_now_ms() + 5000
        assert message_row(message_id)["dequeue_at"] >= before + 2500 or row["attempts"] <= 3
        api.run_now([message_id])


def test_fail_with_retry_delay_retries_after_exactly_that_delay():
    message_id = enqueue("life", "x", max_attempts=3)
    [row] = dequeue("life")
    before = db_now_ms()
    assert fail(row, "come back later", retry_delay_ms=250) == "retry"
    stored = message_row(message_id)
    assert before + 250 <= stored["dequeue_at"] <= db_now_ms() + 250
    assert stored["attempts"] == 1  # it counts as an attempt
    assert stored["last_error"] == "come back later"
    # Released only once the database's clock is past the retry time: a dequeue ran at
    # lease_until - lease, whatever this machine's speed.
    early = dequeue("life")
    for released in early:
        assert released["lease_until"] - LEASE_MS >= stored["dequeue_at"]
    if not early:
        time.sleep(max(0, stored["dequeue_at"] - db_now_ms()) / 1000 + 0.01)
        early = dequeue("life")
    [again] = early
    assert again["id"] == message_id and again["attempts"] == 2
    assert_healthy()


def test_retry_after_delay_still_dead_letters_when_attempts_are_used_up():
    """Design: "attempts beyond max_attempts move it to the dead-letter table"; Retry counts
    as an attempt, so a handler that always asks for a retry must not loop forever."""
    message_id = enqueue("life", "x", max_attempts=2)
    for _ in range(2):
        [row] = dequeue("life")
        outcome = fail(row, "still not ready", retry_delay_ms=0)
    assert row["attempts"] == 2
    if outcome != "dead":
        redelivered = dequeue("life")
        pytest.fail(
            f"fail(retry_delay_ms=0) on attempt 2 of max_attempts=2 returned {outcome!r}, not 'dead'; "
            f"the message was delivered again with attempts="
            f"{[r['attempts'] for r in redelivered]} (more than max_attempts)"
        )
    assert dead_row(message_id)["reason"] == "failed"
    assert message_row(message_id) is None


def test_discard_dead_letters_at_once_with_reason_discarded():
    message_id = enqueue("life", {"bad": True}, max_attempts=5)
    [row] = dequeue("life")
    assert fail(row, "not wanted", discard=True) == "dead"
    dead = dead_row(message_id)
    assert dead["reason"] == "discarded"
    assert dead["last_error"] == "not wanted"
    assert dead["attempts"] == 1
    assert message_row(message_id) is None
    assert_healthy()


def test_fail_of_a_message_that_is_gone_raises_message_not_found():
    message_id = enqueue("life", "x")
    [row] = dequeue("life")
    ack([row])
    with pytest.raises(MessageNotFound), transaction.atomic():
        fail(row)
    assert message_id not in [r["id"] for r in dequeue("life")]


# ---------------------------------------------------------------------------------------
# requeue dead letters
# ---------------------------------------------------------------------------------------


def _kill(queue: str, channel: str = "default", *, attempts: int = 2) -> int:
    message_id = enqueue(queue, {"k": 1}, channel=channel, max_attempts=attempts)
    for _ in range(attempts):
        [row] = dequeue(queue)
        outcome = fail(row, "broken")
        api.run_now([message_id])
    assert outcome == "dead"
    return message_id


def test_requeue_dead_resets_attempts_by_default():
    message_id = _kill("dlq")
    assert api.requeue_dead([message_id]) == [message_id]
    assert dead_row(message_id) is None
    stored = message_row(message_id)
    assert stored["attempts"] == 0 and stored["max_attempts"] == 2
    assert stored["last_error"] == "broken"
    assert stored["dequeue_at"] <= db_now_ms()
    [row] = dequeue("dlq")
    assert row["id"] == message_id and row["attempts"] == 1 and row["payload"] == {"k": 1}
    assert_healthy()


def test_requeue_dead_without_reset_keeps_attempts_and_allows_one_more():
    message_id = _kill("dlq")
    assert api.requeue_dead([message_id], reset_attempts=False) == [message_id]
    stored = message_row(message_id)
    assert stored["attempts"] == 2 and stored["max_attempts"] == 3
    [row] = dequeue("dlq")
    assert row["attempts"] == 3
    assert fail(row, "again") == "dead"
    assert dead_row(message_id)["attempts"] == 3
    assert_healthy()


def test_requeue_dead_ignores_ids_that_are_not_dead():
    live = enqueue("dlq", "x")
    assert api.requeue_dead([live, 987654321]) == []
    assert message_row(live)["attempts"] == 0


def test_requeue_dead_recreates_a_deleted_channel():
    message_id = _kill("dlq", "gone")
    from django_lonnymq.models import Channel

    Channel.objects.filter(queue="dlq", name="gone").delete()
    assert dead_row(message_id)["channel_id"] is None
    assert api.requeue_dead([message_id]) == [message_id]
    channel = channel_row("dlq", "gone")
    assert channel is not None and message_row(message_id)["channel_id"] == channel["id"]
    assert [r["id"] for r in dequeue("dlq")] == [message_id]
    assert_healthy()


# ---------------------------------------------------------------------------------------
# cancel, run_now
# ---------------------------------------------------------------------------------------


def test_cancel_deletes_waiting_messages_and_marks_running_ones():
    waiting = enqueue("ops", "w", delay=3600)
    busy = enqueue("ops", "b")
    [row] = dequeue("ops")
    assert row["id"] == busy
    assert api.cancel([waiting, busy, 123456789], missing_ok=True) == [waiting, busy]
    assert message_row(waiting) is None
    assert message_row(busy)["cancel_requested"] is True
    assert ack([row]) == [busy]  # its worker still owns it; a handler that finished is acked
    assert_healthy()


def test_cancel_frees_the_dedup_key():
    first = enqueue("ops", "a", dedup_key="k")
    assert api.cancel([first]) == [first]
    second = enqueue("ops", "a", dedup_key="k")
    assert second != first
    assert message_row(second) is not None


def test_run_now_makes_a_scheduled_message_ready():
    later = enqueue("ops", "later", delay=3600)
    assert dequeue("ops") == []
    assert api.run_now([later]) == [later]
    assert message_row(later)["dequeue_at"] <= db_now_ms()
    assert [r["id"] for r in dequeue("ops")] == [later]
    assert_healthy()


def test_run_now_leaves_ready_and_in_flight_messages_alone():
    ready = enqueue("ops", "ready")
    busy = enqueue("ops", "busy", channel="other")
    leased = [r for r in dequeue("ops", batch=10) if r["id"] == busy]
    at_before = message_row(busy)["lease_until"]
    assert api.run_now([ready, busy]) == []
    assert message_row(busy)["lease_until"] == at_before
    assert leased and message_row(busy)["lease_token"] == leased[0]["lease_token"]


# ---------------------------------------------------------------------------------------
# extend, release
# ---------------------------------------------------------------------------------------


def test_extend_moves_the_lease_forward():
    message_id = enqueue("ops", "x")
    [row] = dequeue("ops", lease_ms=1000)
    first_until = message_row(message_id)["lease_until"]
    before = db_now_ms()
    assert extend([row], 60_000) == [message_id]
    until = message_row(message_id)["lease_until"]
    assert until >= before + 60_000 > first_until
    forged = dict(row, lease_token=uuid.uuid4())
    assert extend([forged], 60_000) == []
    assert message_row(message_id)["lease_until"] == until


def test_an_extended_lease_is_not_reaped():
    message_id = enqueue("ops", "x")
    [row] = dequeue("ops", lease_ms=100)
    assert extend([row], 60_000) == [message_id]
    expire(100)
    assert reap() == 0
    assert message_row(message_id)["lease_token"] == row["lease_token"]


def test_release_gives_the_message_back_without_counting_the_attempt():
    configure("ops", "c", max_concurrency=1)
    message_id = enqueue("ops", "x", channel="c")
    [row] = dequeue("ops")
    assert release([row]) == [message_id]
    stored = message_row(message_id)
    assert stored["attempts"] == 0 and stored["lease_token"] is None
    assert channel_row("ops", "c")["in_flight"] == 0
    assert release([row]) == []  # the token is spent
    [again] = dequeue("ops")
    assert again["id"] == message_id and again["attempts"] == 1
    assert again["lease_token"] != row["lease_token"]
    assert_healthy()


# ---------------------------------------------------------------------------------------
# reap, stale leases
# ---------------------------------------------------------------------------------------


def test_reap_puts_an_expired_message_back_and_gives_the_slot_back():
    configure("reap", "c", max_concurrency=1)
    first = enqueue("reap", "first", channel="c")
    second = enqueue("reap", "second", channel="c")
    [row] = dequeue("reap", lease_ms=100)
    assert row["id"] == first
    assert channel_row("reap", "c")["in_flight"] == 1
    assert dequeue("reap") == []  # the slot is taken
    expire(100)

    assert reap() == 1
    stored = message_row(first)
    assert stored["lease_until"] is None and stored["lease_token"] is None
    assert stored["attempts"] == 1
    assert stored["last_error"] == "lease expired"
    assert channel_row("reap", "c")["in_flight"] == 0
    assert reap() == 0
    # It goes back to its old position: before the message enqueued after it.
    [again] = dequeue("reap")
    assert again["id"] == first and again["attempts"] == 2
    assert again["lease_token"] != row["lease_token"]
    assert second != again["id"]
    assert_healthy()


def test_a_stale_lease_token_can_neither_ack_nor_extend_nor_fail():
    configure("reap", "c", max_concurrency=1)
    message_id = enqueue("reap", "x", channel="c")
    [old] = dequeue("reap", lease_ms=50)
    expire(50)
    assert reap() == 1
    [new] = dequeue("reap")
    assert new["id"] == message_id and new["lease_token"] != old["lease_token"]

    assert ack([old]) == []  # no id: refused
    assert extend([old], 60_000) == []
    with pytest.raises(LeaseLost) as caught, transaction.atomic():
        fail(old, "late failure")
    assert "stale" in str(caught.value)
    assert translate(caught.value.__cause__) is not None
    assert isinstance(translate(caught.value.__cause__), LeaseLost)

    # The new holder is untouched, and its slot is counted once.
    stored = message_row(message_id)
    assert stored["lease_token"] == new["lease_token"] and stored["attempts"] == 2
    assert stored["last_error"] == "lease expired"
    assert channel_row("reap", "c")["in_flight"] == 1
    assert ack([new]) == [message_id]
    assert channel_row("reap", "c")["in_flight"] == 0
    assert_healthy()


def test_reap_dead_letters_an_expired_lease_with_no_attempts_left():
    configure("reap", "c", max_concurrency=1)
    message_id = enqueue("reap", "x", channel="c", max_attempts=1)
    [row] = dequeue("reap", lease_ms=50)
    expire(50)
    assert reap() == 1
    assert message_row(message_id) is None
    dead = dead_row(message_id)
    assert dead["reason"] == "lease_expired"
    assert dead["attempts"] == 1
    assert channel_row("reap", "c")["in_flight"] == 0
    assert ack([row]) == []
    assert_healthy()


def test_reap_leaves_unexpired_leases_alone_and_honours_its_limit():
    enqueue_many("reap", list(range(5)))
    short = dequeue("reap", batch=3, lease_ms=50)
    long = dequeue("reap", batch=2, lease_ms=60_000)
    expire(50)
    assert reap(limit=2) == 2
    assert reap(limit=2) == 1
    assert reap() == 0
    for row in long:
        assert message_row(row["id"])["lease_token"] == row["lease_token"]
    assert {r["id"] for r in dequeue("reap", batch=10)} == {r["id"] for r in short}


def test_api_reap_validates_its_limit():
    with pytest.raises(InvalidArgument) as caught:
        api.reap(limit=0)
    assert caught.value.field == "limit"
    assert api.reap() == 0


# ---------------------------------------------------------------------------------------
# purge
# ---------------------------------------------------------------------------------------


def test_purge_channel_deletes_what_is_not_in_flight():
    enqueue_many("ops", [1, 2, 3], channel="p")
    other = enqueue("ops", "keep", channel="q")
    got = dequeue("ops", batch=2)  # one from each channel
    [busy] = [r for r in got if r["channel"] == "p"]
    channel_id = channel_row("ops", "p")["id"]
    assert api.purge_channel(channel_id) == 2
    assert message_row(busy["id"]) is not None
    assert message_row(other) is not None
    assert ack([busy]) == [busy["id"]]
