"""Running messages under control, through real ``run_queue_worker`` processes:

- a handler past its timeout is interrupted, fails with reason ``timeout`` and is retried;
- a handler stuck in a C call ignores the interruption: after the grace period its worker
  abandons it and exits with status 1, and the message comes back through its lease;
- a running message cancelled with ``api.cancel()``: the worker learns it at its next
  heartbeat, a cooperative handler sees ``message.cancel_requested``, another is
  interrupted after the cancel grace; the message is dead with reason ``cancelled`` and the
  channel's concurrency slot comes back;
- ``async def`` handlers overlap on the worker's event loop, bounded by ``--concurrency``;
  an async view enqueues with ``aenqueue`` and a worker runs the message.

Times are judged on the database's clock (the ``at`` of the rows the handlers write), with
generous bounds: the machine is shared.
"""

from __future__ import annotations

import time

from asgiref.sync import async_to_sync
from django.test import AsyncClient, override_settings

from django_lonnymq import api, enqueue, enqueue_many
from tests.worker.conftest import describe, wait_until

SETTINGS = "tests.worker.settings_control"


def seconds_between(earlier: dict, later: dict) -> float:
    return (later["at"] - earlier["at"]).total_seconds()


def test_a_handler_past_its_timeout_is_interrupted_and_retried(spawn, db):
    message_id = enqueue("ctl_nap", {"seconds": 60}, max_attempts=2)

    worker = spawn("--queue", "ctl_nap", settings=SETTINGS)
    [dead] = wait_until(lambda: db.dead("ctl_nap"), 30, "the dead-letter row", worker)
    assert worker.stop() == 0, describe(worker)

    events = [(d["message_id"], d["attempt"], d["event"]) for d in db.deliveries("ctl_nap")]
    assert events == [
        (message_id, 1, "start"),
        (message_id, 1, "stopped"),
        (message_id, 2, "start"),
        (message_id, 2, "stopped"),
    ], describe(worker)
    start1, stop1, start2, stop2 = db.deliveries("ctl_nap")
    for start, stop in ((start1, stop1), (start2, stop2)):
        ran = seconds_between(start, stop)
        assert 0.95 <= ran <= 2.5, f"interrupted after {ran:.2f}s with a 1 s timeout\n{describe(worker)}"
    assert dead["reason"] == "timeout" and dead["attempts"] == 2
    assert dead["last_error"].startswith("timed out after 1s"), dead["last_error"]
    assert "HandlerTimeout" in dead["last_error"] and "_naps" in dead["last_error"]
    stats = worker.stats()
    assert (stats["timed_out"], stats["retried"], stats["dead"], stats["abandoned"]) == (2, 1, 1, 0), describe(
        worker
    )
    assert api.check() == []


def test_a_handler_stuck_in_a_c_call_is_abandoned_and_its_message_comes_back(spawn, db):
    message_id = enqueue("ctl_stuck", {"seconds": 60}, max_attempts=3)

    stuck = spawn("--queue", "ctl_stuck", "--lease", "2s", settings=SETTINGS, label="stuck")
    wait_until(lambda: db.events("start", "ctl_stuck"), 20, "the handler to start", stuck)
    started = time.monotonic()
    code = stuck.wait(timeout=30)
    exited_after = time.monotonic() - started
    # timeout 1 s + grace 2 s, then the other handlers (none) finish and it exits.
    assert code == 1, describe(stuck)
    assert exited_after <= 1 + 2 + 4, f"exited {exited_after:.1f}s after the start\n{describe(stuck)}"
    assert "abandoning it" in stuck.output and "abandoned=1" in stuck.output, describe(stuck)
    [leased] = db.messages("ctl_stuck")
    assert leased["lease_token"] is not None  # never given back: it may still be running

    rescuer = spawn("--queue", "ctl_stuck", "--burst", "--lease", "2s", settings=SETTINGS, label="rescuer")
    assert rescuer.wait(timeout=30) == 0, describe(stuck, rescuer)
    deliveries = [(d["message_id"], d["attempt"], d["event"], d["pid"]) for d in db.deliveries("ctl_stuck")]
    assert deliveries == [
        (message_id, 1, "start", stuck.pid),
        (message_id, 2, "start", rescuer.pid),
        (message_id, 2, "done", rescuer.pid),
    ], describe(stuck, rescuer)
    assert rescuer.stats()["reaped"] >= 1
    assert db.messages("ctl_stuck") == [] and db.dead("ctl_stuck") == []
    assert api.check() == []


def test_cancelling_a_running_message_interrupts_it_and_frees_its_slot(spawn, db):
    api.configure_channel("ctl_busy", "solo", max_concurrency=1)
    first = enqueue("ctl_busy", {"seconds": 60}, channel="solo", max_attempts=5)
    second = enqueue("ctl_busy", {"seconds": 0}, channel="solo")

    # A 3 s lease: the heartbeat runs every second.
    worker = spawn("--queue", "ctl_busy", "--lease", "3s", "--concurrency", "2", settings=SETTINGS)
    wait_until(lambda: db.events("start", "ctl_busy"), 20, "the first handler to start", worker)
    assert db.channel("ctl_busy", "solo")["in_flight"] == 1
    asked_at = db.scalar("SELECT clock_timestamp()")
    assert api.cancel([first]) == [first]

    wait_until(lambda: db.events("done", "ctl_busy"), 20, "the second message to run", worker)
    assert worker.stop() == 0, describe(worker)
    [stopped] = [d for d in db.events("stopped", "ctl_busy") if d["message_id"] == first]
    took = (stopped["at"] - asked_at).total_seconds()
    # Within one heartbeat (1 s) plus the cancel grace (0.5 s); slack for a loaded machine.
    assert took <= 1 + 0.5 + 1.5, f"stopped {took:.2f}s after the cancel\n{describe(worker)}"
    [dead] = db.dead("ctl_busy")
    assert (dead["id"], dead["reason"], dead["attempts"]) == (first, "cancelled", 1)
    assert "cancelled while running" in dead["last_error"] and "HandlerCancelled" in dead["last_error"]
    # The slot came back: the second message of the capped channel ran after it.
    events = [(d["message_id"], d["event"]) for d in db.deliveries("ctl_busy")]
    assert events == [(first, "start"), (first, "stopped"), (second, "start"), (second, "stopped"), (second, "done")]
    assert db.channel("ctl_busy", "solo")["in_flight"] == 0
    assert worker.stats()["cancelled"] == 1
    # requeue works on it
    assert api.requeue_dead([first]) == [first]
    assert db.messages("ctl_busy")[0]["cancel_requested"] is False
    api.cancel([first])
    assert api.check() == []


def test_a_cooperative_handler_sees_cancel_requested_within_one_heartbeat(spawn, db):
    message_id = enqueue("ctl_coop", {"seconds": 60})

    worker = spawn("--queue", "ctl_coop", "--lease", "3s", settings=SETTINGS)
    wait_until(lambda: db.events("start", "ctl_coop"), 20, "the handler to start", worker)
    asked_at = db.scalar("SELECT clock_timestamp()")
    api.cancel([message_id])
    [dead] = wait_until(lambda: db.dead("ctl_coop"), 20, "the dead-letter row", worker)
    assert worker.stop() == 0, describe(worker)

    [noticed] = db.events("noticed", "ctl_coop")
    took = (noticed["at"] - asked_at).total_seconds()
    assert took <= 1 + 1.5, f"noticed {took:.2f}s after the cancel (heartbeat 1 s)\n{describe(worker)}"
    # It returned normally, before the interruption: the message is still cancelled, not acked.
    assert dead["reason"] == "cancelled" and dead["last_error"] == "cancelled while running"
    assert worker.stats()["acked"] == 0


def test_async_handlers_overlap_on_the_event_loop_bounded_by_concurrency(spawn, db):
    ids = enqueue_many("ctl_async", [{"seconds": 0.1, "n": n} for n in range(200)], channel="many")

    worker = spawn("--queue", "ctl_async", "--concurrency", "50", "--burst", settings=SETTINGS)
    assert worker.wait(timeout=60) == 0, describe(worker)

    done = db.events("done", "ctl_async")
    assert sorted(d["message_id"] for d in done) == sorted(ids), "a message ran twice or never"
    spans = [(d["payload"]["started"], d["payload"]["ended"]) for d in done]
    handler_time = max(e for _, e in spans) - min(s for s, _ in spans)
    # 200 x 100 ms one after another would take 20 s; 50 at a time, 4 rounds: about 0.4 s.
    assert handler_time < 2.0, f"200 async handlers took {handler_time:.2f}s\n{describe(worker)}"
    # Never more than --concurrency at once, and many at once.
    points = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda p: (p[0], p[1]))
    running = peak = 0
    for _, step in points:
        running += step
        peak = max(peak, running)
    assert 25 <= peak <= 50, f"peak of {peak} handlers at once"
    print(f"200 async handlers of 100 ms, --concurrency 50: {handler_time:.3f}s of handler time, peak {peak}")
    assert db.messages("ctl_async") == []


def test_an_async_handler_past_its_timeout_is_cancelled(spawn, db):
    message_id = enqueue("ctl_async_slow", {"seconds": 60}, max_attempts=1)

    worker = spawn("--queue", "ctl_async_slow", settings=SETTINGS)
    [dead] = wait_until(lambda: db.dead("ctl_async_slow"), 20, "the dead-letter row", worker)
    assert worker.stop() == 0, describe(worker)
    start, stopped = db.deliveries("ctl_async_slow")
    assert (start["event"], stopped["event"]) == ("start", "stopped")
    assert 0.95 <= seconds_between(start, stopped) <= 2.5
    assert (dead["id"], dead["reason"]) == (message_id, "timeout")
    assert "CancelledError" in dead["last_error"]


def test_an_async_view_enqueues_with_aenqueue_and_a_worker_runs_it(spawn, db):
    with override_settings(ROOT_URLCONF="tests.worker.urls_control"):
        response = async_to_sync(AsyncClient().get)("/start-job/?n=7")
    message_id = response.json()["message_id"]

    worker = spawn("--queue", "ctl_async", "--burst", settings=SETTINGS)
    assert worker.wait(timeout=30) == 0, describe(worker)
    [done] = db.events("done", "ctl_async")
    assert (done["message_id"], done["channel"]) == (message_id, "view")
