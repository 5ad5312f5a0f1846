"""Pausing one of two queues a worker process serves: the other keeps flowing, enqueues into
the paused one still land, and resuming drains it (real ``run_queue_worker`` subprocess)."""

from __future__ import annotations

import time

from django_lonnymq import Item, api, enqueue, enqueue_many
from tests.worker.conftest import describe, wait_until

PAUSED, OTHER = "t_record", "t_noop"


def test_a_paused_queue_waits_while_the_other_queue_of_the_same_worker_flows(spawn, db):
    api.pause_queue(PAUSED)
    held = enqueue_many(PAUSED, [Item({"n": n}, channel=f"c{n % 3}") for n in range(5)])
    worker = spawn("--queue", PAUSED, "--queue", OTHER, "--concurrency", "2")

    # The other queue flows through the same process, message after message.
    for round_number in range(3):
        flowing = enqueue_many(OTHER, [Item({"n": n}) for n in range(10)])
        wait_until(lambda: not db.messages(OTHER), 20, f"{OTHER} round {round_number} drained", worker)
        assert all(m not in {r["id"] for r in db.messages(OTHER)} for m in flowing)
        # Writes into the paused queue still land, and nothing of it is taken.
        held.append(enqueue(PAUSED, {"n": f"late-{round_number}"}))
        time.sleep(0.3)
    messages = db.messages(PAUSED)
    assert sorted(r["id"] for r in messages) == sorted(held), describe(worker)
    assert all(r["lease_until"] is None and r["attempts"] == 0 for r in messages), describe(worker)
    assert db.events("done", PAUSED) == []
    assert worker.alive(), describe(worker)

    # Resuming wakes the idle worker, which drains the queue without a restart.
    began = time.monotonic()
    api.resume_queue(PAUSED)
    wait_until(lambda: not db.messages(PAUSED), 20, f"{PAUSED} drained after resume", worker)
    assert sorted(d["message_id"] for d in db.events("done", PAUSED)) == sorted(held)
    assert time.monotonic() - began < 15, describe(worker)
    assert worker.alive(), describe(worker)
