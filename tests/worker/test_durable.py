"""Durable handlers in real worker processes: steps survive a SIGKILL, a sleep gives the only
thread back, a wait resumes on a committed emit and not on a rolled-back one."""

from __future__ import annotations

import signal
import time

import pytest
from django.db import transaction

from django_lonnymq import Workflow, api, enqueue

from .conftest import describe, wait_until

SETTINGS = "tests.worker.settings_durable"


def _events(db, queue):
    return [(d["message_id"], d["attempt"], d["event"]) for d in db.deliveries(queue)]


def test_a_worker_killed_inside_the_third_step_reruns_only_that_step(spawn, db):
    msg = enqueue("acc_durable_steps", {"third_seconds": 30})
    victim = spawn("--queue", "acc_durable_steps", "--lease", "2s", settings=SETTINGS, label="victim")
    # The third step's write is made, its transaction still open: the worker dies there.
    wait_until(
        lambda: db.scalar("SELECT count(*) FROM lonnymq_step WHERE name = 'email'"), 20, "two steps", victim
    )
    wait_until(
        lambda: db.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'"
            " AND query LIKE '%testapp_delivery%'"
        ),  # fmt: skip
        10,
        "the third step to write",
        victim,
    )
    victim.signal(signal.SIGKILL)
    assert victim.wait(timeout=10) == -signal.SIGKILL
    assert _events(db, "acc_durable_steps") == [(msg, 1, "charge"), (msg, 1, "email")]

    rescuer = spawn(
        "--queue", "acc_durable_steps", "--burst", "--lease", "2s", settings=SETTINGS, label="rescuer"
    )
    assert rescuer.wait(timeout=30) == 0, describe(victim, rescuer)
    assert _events(db, "acc_durable_steps") == [
        (msg, 1, "charge"),
        (msg, 1, "email"),
        (msg, 2, "provision"),
        (msg, 2, "done"),
    ], describe(victim, rescuer)
    assert db.messages("acc_durable_steps") == [] and db.dead("acc_durable_steps") == []
    assert rescuer.stats()["acked"] == 1, describe(rescuer)


def test_a_sleep_gives_the_only_thread_to_another_channel_and_resumes_after_it(spawn, db):
    sleeper = enqueue("acc_durable_sleep", {"sleep": 3}, channel="a")
    worker = spawn("--queue", "acc_durable_sleep", "--concurrency", "1", settings=SETTINGS, label="worker")
    wait_until(
        lambda: db.scalar("SELECT count(*) FROM lonnymq_step WHERE name = 'nap'"), 20, "the sleep", worker
    )
    other = enqueue("acc_durable_sleep", {}, channel="b")
    wait_until(lambda: "done" in [e for _, e in _by(db, other)], 5, "the other channel's message", worker)
    assert [e for _, e in _by(db, sleeper)] == ["before", "run"]  # still asleep
    # It is suspended: out of flight, no attempt spent, due at the end of its sleep.
    [row] = [m for m in db.messages("acc_durable_sleep") if m["id"] == sleeper]
    assert row["lease_until"] is None and row["attempts"] == 0, row
    wait_until(lambda: "done" in [e for _, e in _by(db, sleeper)], 10, "the sleeper to finish", worker)
    assert worker.stop() == 0, describe(worker)
    assert [e for _, e in _by(db, sleeper)] == ["before", "run", "run", "after", "done"]
    times = {e: at for e, at in _times(db, sleeper)}
    slept = (times["done"] - times["before"]).total_seconds()
    assert 2.9 <= slept < 8, slept
    assert db.messages("acc_durable_sleep") == []


def _by(db, message_id):
    return [
        (d["attempt"], d["event"])
        for d in db.deliveries("acc_durable_sleep")
        if d["message_id"] == message_id
    ]


def _times(db, message_id):
    return [(d["event"], d["at"]) for d in db.deliveries() if d["message_id"] == message_id]


def _wait_events(db, message_id):
    return [d["event"] for d in db.deliveries("acc_durable_wait") if d["message_id"] == message_id]


def test_a_wait_resumes_on_a_committed_emit_only_before_or_after_and_times_out(spawn, db):
    api.emit_event("acc-early", {"by": "early"})  # before anyone waits: kept
    waiting = enqueue("acc_durable_wait", {"key": "acc-k1"})
    early = enqueue("acc_durable_wait", {"key": "acc-early"})
    timing_out = enqueue("acc_durable_wait", {"key": "acc-never", "timeout": 1})
    worker = spawn("--queue", "acc_durable_wait", "--concurrency", "2", settings=SETTINGS, label="worker")
    wait_until(lambda: _wait_events(db, early) == ["run", "event:early"], 20, "the early event", worker)
    wait_until(lambda: _wait_events(db, timing_out) == ["run", "run", "timeout"], 10, "the timeout", worker)
    wait_until(lambda: _wait_events(db, waiting) == ["run"], 5, "the wait", worker)

    with pytest.raises(RuntimeError), transaction.atomic():
        api.emit_event("acc-k1", {"by": "rolled back"})
        raise RuntimeError("roll back")
    time.sleep(1.5)
    assert _wait_events(db, waiting) == ["run"]  # nothing resumed
    assert db.scalar("SELECT count(*) FROM lonnymq_event WHERE key = 'acc-k1'") == 0

    emitted = time.monotonic()
    assert api.emit_event("acc-k1", {"by": "alice"}) is True
    wait_until(lambda: _wait_events(db, waiting) == ["run", "run", "event:alice"], 5, "the resume", worker)
    assert time.monotonic() - emitted < 1.0
    assert api.emit_event("acc-k1", {"by": "bob"}) is False  # first write wins
    assert worker.stop() == 0, describe(worker)
    assert db.messages("acc_durable_wait") == [] and db.dead("acc_durable_wait") == []


def test_a_wait_in_an_ordered_channel_holds_the_next_message_until_its_event(spawn, db):
    """Strict order with a durable wait: the waiting message keeps its place, the next one
    (whose own event is already there) does not run before it, and the emit lets both go in
    order, at once."""
    api.configure_channel("acc_durable_wait", "acme", ordered=True)
    api.emit_event("acc-ord-second", {"by": "early"})
    first = enqueue("acc_durable_wait", {"key": "acc-ord-first"}, channel="acme")
    second = enqueue("acc_durable_wait", {"key": "acc-ord-second"}, channel="acme")
    worker = spawn("--queue", "acc_durable_wait", "--concurrency", "2", settings=SETTINGS, label="worker")
    wait_until(lambda: _wait_events(db, first) == ["run"], 20, "the first to wait", worker)
    time.sleep(1.5)
    assert _wait_events(db, second) == [], describe(worker)  # held behind the waiting first
    emitted = time.monotonic()
    api.emit_event("acc-ord-first", {"by": "alice"})
    wait_until(lambda: _wait_events(db, second) == ["run", "event:early"], 10, "both, in order", worker)
    assert time.monotonic() - emitted < 5.0
    assert _wait_events(db, first) == ["run", "run", "event:alice"]
    done = [d["message_id"] for d in db.deliveries("acc_durable_wait") if d["event"].startswith("event:")]
    assert done == [first, second]
    assert worker.stop() == 0, describe(worker)


def test_a_waiting_message_cancelled_in_a_real_worker_is_gone_and_an_emit_resumes_nothing(spawn, db):
    waiting = enqueue("acc_durable_wait", {"key": "acc-cancelled"})
    worker = spawn("--queue", "acc_durable_wait", settings=SETTINGS, label="worker")
    wait_until(lambda: _wait_events(db, waiting) == ["run"], 20, "the wait", worker)
    # Suspended: its pending wait checkpointed and its lease given back.
    wait_until(lambda: api.suspended_counts() == {"acc_durable_wait": 1}, 5, "the suspension", worker)
    assert api.cancel([waiting]) == [waiting]
    assert db.messages("acc_durable_wait") == [] and db.dead("acc_durable_wait") == []
    assert api.suspended_counts() == {}
    assert api.emit_event("acc-cancelled", {"by": "late"}) is True  # kept, but no one waits
    time.sleep(1.5)
    assert _wait_events(db, waiting) == ["run"]  # the cancelled message did not run again
    assert worker.stop() == 0, describe(worker)


def test_a_workflow_step_sleeps_durably_in_a_real_worker_then_releases_its_child(spawn, db):
    flow = Workflow("durable-flow", channel="t")
    nap = flow.step("acc_durable_flow", {"sleep": 1}, name="nap")
    flow.step("acc_durable_flow_child", {}, name="child", after=[nap])
    workflow_id = flow.start()
    worker = spawn(
        "--queue", "acc_durable_flow", "--queue", "acc_durable_flow_child", settings=SETTINGS, label="worker"
    )
    wait_until(lambda: api.suspended_counts() == {"acc_durable_flow": 1}, 20, "the sleep", worker)
    assert api.workflow(workflow_id).step("child").state == "waiting"
    wait_until(lambda: api.workflow(workflow_id).state == "succeeded", 15, "the workflow", worker)
    assert worker.stop() == 0, describe(worker)
    events = [d["event"] for d in db.deliveries()]
    assert events.count("quote") == 1 and events.count("woke") == 1, events  # the step ran once
    assert events[-1] == "child:q1", events  # released after the step, with its output
    assert db.messages("acc_durable_flow") == [] and db.dead("acc_durable_flow") == []
