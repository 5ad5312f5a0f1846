"""A cancel wakes the worker that runs the message: it runs its heartbeat at once instead of
at the next lease extension (a third of the lease, 10 s by default).

- a cooperative handler (it checks ``message.cancel_requested``) stops within about a second;
- one that ignores it is interrupted within ``LONNYMQ_CANCEL_GRACE`` (1 s) and about a second.

Workers run with the default 30 s lease, so the heartbeat alone would take 10 s.
"""

from __future__ import annotations

import statistics

from django_lonnymq import api, enqueue
from tests.worker.conftest import describe, wait_until

SETTINGS = "tests.worker.settings_control_defaults"
ROUNDS = 3


def cancel_to_event(db, worker, queue: str, event: str) -> float:
    """Enqueue, wait for the handler to start, cancel it: seconds until it records ``event``."""
    message_id = enqueue(queue, {"seconds": 60})
    wait_until(
        lambda: [d for d in db.events("start", queue) if d["message_id"] == message_id],
        30,
        "the handler to start",
        worker,
    )
    asked_at = db.scalar("SELECT clock_timestamp()")
    assert api.cancel([message_id]) == [message_id]
    found = wait_until(
        lambda: [d for d in db.events(event, queue) if d["message_id"] == message_id],
        30,
        f"the handler to record {event!r}",
        worker,
    )
    wait_until(lambda: [d for d in db.dead(queue) if d["id"] == message_id], 30, "the dead letter", worker)
    return (found[0]["at"] - asked_at).total_seconds()


def test_a_cooperative_handler_stops_within_a_second_or_two_of_the_cancel(spawn, db):
    worker = spawn("--queue", "ctl_coop", settings=SETTINGS)
    took = [cancel_to_event(db, worker, "ctl_coop", "noticed") for _ in range(ROUNDS)]
    assert worker.stop() == 0, describe(worker)
    print(f"cancel to stop (cooperative), seconds: {[round(t, 3) for t in took]}")
    # The heartbeat alone comes 10 s after the lease starts; the wake-up takes milliseconds.
    assert statistics.median(took) <= 2, f"{took}\n{describe(worker)}"
    assert max(took) <= 4, f"{took}\n{describe(worker)}"
    assert [d["reason"] for d in db.dead("ctl_coop")] == ["cancelled"] * ROUNDS


def test_a_handler_that_ignores_the_cancel_is_interrupted_within_the_grace_and_a_second(spawn, db):
    worker = spawn("--queue", "ctl_busy", settings=SETTINGS)
    took = [cancel_to_event(db, worker, "ctl_busy", "stopped") for _ in range(ROUNDS)]
    assert worker.stop() == 0, describe(worker)
    print(f"cancel to interruption (grace 1 s), seconds: {[round(t, 3) for t in took]}")
    assert statistics.median(took) <= 1 + 1, f"{took}\n{describe(worker)}"
    assert max(took) <= 1 + 3, f"{took}\n{describe(worker)}"
    dead = db.dead("ctl_busy")
    assert [d["reason"] for d in dead] == ["cancelled"] * ROUNDS
    assert all("HandlerCancelled" in d["last_error"] for d in dead)
