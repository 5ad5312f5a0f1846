"""Durable sleeps and waits in an ordered channel: the suspended message keeps its place and
holds its channel (nothing after it runs), and it runs first when its sleep ends, its event
comes, its wait times out or an operator resumes it."""

from __future__ import annotations

import pytest

from django_lonnymq import api, enqueue_many
from tests.harness.helpers import channel_row, dequeue, scalar

pytestmark = pytest.mark.django_db

Q = "q_ordered_durable"


def ids(leased: list[dict]) -> list[int]:
    return [m["id"] for m in leased]


def suspend(leased: dict, name: str, *, key: str | None = None, delay_ms: int | None = None) -> None:
    token = str(leased["lease_token"])
    state = scalar(
        "SELECT state FROM lonnymq_durable_pause_v1(%s, %s, %s, %s, %s)",
        [leased["id"], token, name, key, delay_ms],
    )
    assert state == "suspend"
    assert scalar("SELECT lonnymq_suspend_v1(%s, %s, %s)", [leased["id"], token, name]) == "suspended"


def test_a_wait_holds_its_ordered_channel_and_its_event_lets_it_run_first():
    api.configure_channel(Q, "acme", ordered=True)
    first, second = enqueue_many(Q, [{"n": 1}, {"n": 2}], channel="acme")
    [leased] = dequeue(Q, batch=10)
    assert leased["id"] == first
    suspend(leased, "approval", key="order-1-approved")
    assert dequeue(Q, batch=10) == []  # the second does not pass the waiting first
    api.emit_event("order-1-approved", {"ok": True})
    assert ids(dequeue(Q, batch=10)) == [first]


def test_a_sleep_holds_its_ordered_channel_until_it_ends():
    api.configure_channel(Q, "acme", ordered=True)
    first, second = enqueue_many(Q, [{"n": 1}, {"n": 2}], channel="acme")
    [leased] = dequeue(Q, batch=10)
    suspend(leased, "pause", delay_ms=60_000)
    assert dequeue(Q, batch=10) == []
    assert channel_row(Q, "acme")["hold_until"] is not None
    assert api.resume([first]) == [first]  # an operator ends the sleep now
    assert ids(dequeue(Q, batch=10)) == [first]


def test_run_now_of_a_held_retry_runs_it_first_and_one_behind_it_lifts_nothing():
    api.configure_channel(Q, "acme", ordered=True)
    first, second = enqueue_many(Q, [{"n": 1}, {"n": 2}], channel="acme")
    [leased] = dequeue(Q, batch=10)
    assert (
        scalar(
            "SELECT lonnymq_fail_v2(%s, %s, 'boom', 600000, 'failed', 0, 0, 50)",
            [first, str(leased["lease_token"])],
        )
        == "retry"
    )
    assert dequeue(Q, batch=10) == []  # held for ten minutes
    assert api.run_now([second]) == []  # not the head: the hold stays, nothing passes
    assert dequeue(Q, batch=10) == []
    assert api.run_now([first]) == [first]
    assert ids(dequeue(Q, batch=10)) == [first]


def test_a_dead_message_s_block_is_not_lifted_by_running_the_next_one_now():
    api.configure_channel(Q, "acme", ordered=True)
    first, second = enqueue_many(Q, [{"n": 1, "a": 1}, {"n": 2}], channel="acme", max_attempts=1)
    [leased] = dequeue(Q, batch=10)
    scalar(
        "SELECT lonnymq_fail_v2(%s, %s, 'boom', NULL, 'failed', 0, 0, 50)",
        [first, str(leased["lease_token"])],
    )
    assert channel_row(Q, "acme")["blocked_by"] == first
    api.run_now([second])
    assert dequeue(Q, batch=10) == []  # blocked until requeued or skipped
