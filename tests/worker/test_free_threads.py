"""A worker with a free handler thread starts ready work at once, whatever its other threads
are doing; a buffer of leased messages (``--batch-size`` above ``--concurrency``) gives back
what waits longer than ``BUFFER_HOLD`` for a thread (real ``run_queue_worker`` subprocesses).

Long jobs run 45 s: the tests never wait for them (the workers are stopped with a short
shutdown timeout, and their messages are left to the test's cleanup).
"""

from __future__ import annotations

import time

import pytest

from django_lonnymq import Item, api, enqueue_many
from django_lonnymq.worker.loop import BUFFER_HOLD
from tests.worker.conftest import describe, wait_until

QUEUE = "t_sleep"


def started_at(db, ids: list[int]) -> dict[int, object]:
    return {d["message_id"]: d["at"] for d in db.events("start", QUEUE) if d["message_id"] in ids}


@pytest.mark.parametrize(
    ("concurrency", "busy", "new", "within"),
    [(8, 5, 1, 1.0), (8, 7, 5, 5.0), (4, 3, 1, 1.0), (4, 3, 5, 5.0)],
    ids=[
        "8-threads-5-busy-1-new",
        "8-threads-7-busy-5-new",
        "4-threads-3-busy-1-new",
        "4-threads-3-busy-5-new",
    ],
)
def test_a_free_thread_starts_new_work_while_the_others_run_long_jobs(
    spawn, db, concurrency, busy, new, within
):
    long_ids = enqueue_many(QUEUE, [Item({"seconds": 45}, channel=f"long-{n}") for n in range(busy)])
    worker = spawn("--queue", QUEUE, "--concurrency", str(concurrency), "--shutdown-timeout", "1s")
    wait_until(lambda: len(started_at(db, long_ids)) == busy, 15, f"{busy} long jobs to start", worker)

    enqueued_at = db.scalar("SELECT clock_timestamp()")
    new_ids = enqueue_many(QUEUE, [Item({"seconds": 0.05}, channel=f"short-{n}") for n in range(new)])

    def all_started() -> dict[int, object] | None:
        found = started_at(db, new_ids)
        return found if len(found) == new else None

    starts = wait_until(
        all_started,
        within + 10,
        f"{new} new job(s) to start beside {busy} long ones",
        worker,
    )
    waited = max((at - enqueued_at).total_seconds() for at in starts.values())
    assert waited <= within, f"the last new job started {waited:.2f}s after its enqueue\n{describe(worker)}"
    assert len(started_at(db, long_ids)) == busy  # the long jobs still run, none started twice
    assert worker.stop(sig=15) == 0, describe(worker)


def test_the_buffer_gives_back_what_waits_for_a_thread_so_a_free_worker_runs_it(spawn, db):
    """Two long jobs fill a worker's two threads; the rest of its batch of ten, leased into its
    buffer, is given back after BUFFER_HOLD and a second worker with free threads runs it."""
    ids = enqueue_many(QUEUE, [Item({"seconds": 45 if n < 2 else 0.05}, channel=f"c{n}") for n in range(10)])
    first = spawn("--queue", QUEUE, "--concurrency", "2", "--batch-size", "10", "--shutdown-timeout", "1s")
    wait_until(lambda: len(started_at(db, ids)) >= 2, 15, "the first worker to start two jobs", first)
    second = spawn("--queue", QUEUE, "--concurrency", "8", "--shutdown-timeout", "1s", label="second worker")

    wait_until(
        lambda: len(db.events("done", QUEUE)) == 8 and len(db.messages(QUEUE)) == 2,
        BUFFER_HOLD + 15,
        "the other 8 to be done and acked",
        first,
        second,
    )
    runs = db.events("start", QUEUE)
    assert sorted(d["message_id"] for d in runs) == sorted(ids), "a message ran twice or never"
    assert len(db.messages(QUEUE)) == 2, "only the two long jobs are left"
    for message in db.messages(QUEUE):
        assert message["attempts"] == 1, message  # a buffered message given back spends no attempt
    assert first.stop(sig=15) == 0, describe(first)
    assert second.stop(sig=15) == 0, describe(second)
    assert first.stats()["released"] >= 1, describe(first)


def test_a_paused_queue_stops_starting_buffered_messages_within_the_hold(spawn, db):
    """Messages leased into a buffer before a pause do not keep starting after it: within
    BUFFER_HOLD the worker gives them back, and the paused queue holds them."""
    ids = enqueue_many(QUEUE, [Item({"seconds": 0.5}, channel=f"c{n}") for n in range(20)])
    worker = spawn("--queue", QUEUE, "--concurrency", "2", "--batch-size", "20", "--shutdown-timeout", "2s")
    wait_until(lambda: len(started_at(db, ids)) >= 2, 15, "the first two jobs to start", worker)
    api.pause_queue(QUEUE)
    paused_at = db.scalar("SELECT clock_timestamp()")
    time.sleep(BUFFER_HOLD + 2.5)

    late = [d for d in db.events("start", QUEUE) if (d["at"] - paused_at).total_seconds() > BUFFER_HOLD + 0.6]
    assert late == [], (
        f"{len(late)} start(s) more than {BUFFER_HOLD + 0.6}s after the pause\n{describe(worker)}"
    )
    waiting = db.messages(QUEUE)
    assert waiting, "the paused queue still holds messages"
    assert all(m["lease_until"] is None for m in waiting), "nothing of the paused queue stays leased"
    assert all(m["attempts"] == 0 for m in waiting)
    api.resume_queue(QUEUE)
    wait_until(lambda: not db.messages(QUEUE), 30, "the queue to drain after the resume", worker)
    assert worker.stop(sig=15) == 0, describe(worker)
    # After a give-back the worker fetches only for its idle threads (BUFFER_PAUSE): handlers
    # too slow for its buffer are not leased and given back again every second.
    assert worker.stats()["released"] < 20, describe(worker)
