"""A channel's max_concurrency holds across several worker processes, in messages and in slots."""

from __future__ import annotations

from collections import Counter

from django_lonnymq import Item, api, enqueue_many
from tests.conftest import WORKER_STARTED
from tests.worker.conftest import describe, wait_until


def test_three_worker_processes_never_exceed_a_channel_limit_of_2(spawn, db):
    api.configure_channel("t_sleep", "capped", max_concurrency=2)
    db.track_inflight("capped", "free")
    # The three serve before anything is enqueued: on a loaded machine a worker still
    # importing Django would leave the others to drain it all, and the test see no overlap.
    workers = [spawn("--queue", "t_sleep", "--concurrency", "3", label=f"worker {n}") for n in range(3)]
    for worker in workers:
        worker.wait_for_line(WORKER_STARTED, timeout=60)
    capped = enqueue_many("t_sleep", [Item({"seconds": 0.25}, channel="capped") for _ in range(14)])
    free = enqueue_many("t_sleep", [Item({"seconds": 0.25}, channel="free") for _ in range(14)])

    wait_until(lambda: len(db.events("done", "t_sleep")) >= 28, 60, "the 28 messages to run", *workers)
    codes = [w.stop() for w in workers]

    assert codes == [0, 0, 0], describe(*workers)
    done = db.events("done", "t_sleep")
    assert Counter(d["message_id"] for d in done) == Counter(capped + free), describe(*workers)
    peaks = {r["channel"]: r for r in db.rows("SELECT * FROM testapp_inflight")}
    assert peaks["capped"]["peak"] <= 2, f"limit exceeded: {peaks}\n{describe(*workers)}"
    # The test could have failed: the capped channel really ran two at once...
    assert peaks["capped"]["peak"] == 2, f"never reached the limit: {peaks}"
    # ...and the workers had room for more (the uncapped channel ran more than two at once).
    assert peaks["free"]["peak"] > 2, f"workers never ran concurrently: {peaks}"
    assert all(r["now"] == 0 for r in peaks.values()), peaks
    assert len({d["pid"] for d in db.events("start", "t_sleep")}) >= 2, "only one process did work"
    assert db.channel("t_sleep", "capped")["in_flight"] == 0
    assert api.check() == []


def test_worker_processes_count_a_channel_cap_in_slots(spawn, db):
    """Messages of 3 slots and of 1 under a cap of 4: never more than 4 slots at once (by
    messages, 4 at once would be up to 12 slots), and a 3-slot and a 1-slot message do run
    together; the other channel, without a cap, runs more than 4 at once."""
    api.configure_channel("t_sleep", "gpu", max_concurrency=4)
    db.track_inflight("gpu", "free")
    workers = [spawn("--queue", "t_sleep", "--concurrency", "4", label=f"worker {n}") for n in range(2)]
    for worker in workers:
        worker.wait_for_line(WORKER_STARTED, timeout=60)
    heavy = enqueue_many(
        "t_sleep",
        [Item({"seconds": 0.2, "slots": slots}, channel="gpu", slots=slots) for slots in [3, 1] * 6],
    )
    free = enqueue_many("t_sleep", [Item({"seconds": 0.2}, channel="free") for _ in range(12)])

    wait_until(lambda: len(db.events("done", "t_sleep")) >= 24, 60, "the 24 messages to run", *workers)
    codes = [w.stop() for w in workers]

    assert codes == [0, 0], describe(*workers)
    assert Counter(d["message_id"] for d in db.events("done", "t_sleep")) == Counter(heavy + free)
    peaks = {r["channel"]: r for r in db.rows("SELECT * FROM testapp_inflight")}
    assert peaks["gpu"]["peak"] <= 4, f"cap exceeded in slots: {peaks}\n{describe(*workers)}"
    assert peaks["gpu"]["peak"] >= 3, f"the slots were never in flight together: {peaks}"
    assert peaks["free"]["peak"] > 4, f"workers never ran concurrently: {peaks}"
    assert db.channel("t_sleep", "gpu")["in_flight"] == 0
    assert api.check() == []
