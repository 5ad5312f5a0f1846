"""A queue-wide max_concurrency holds across worker processes and threads and all channels,
and a worker killed mid-job gives its queue slots back once its leases expire."""

from __future__ import annotations

import signal
import threading
from collections import Counter

from django_lonnymq import Item, api, enqueue_many
from tests.worker.conftest import describe, wait_until

SETTINGS = "tests.worker.settings_extra"
QUEUE = "acc_qcap"
IN_FLIGHT = "queue:acc_qcap"
LEASED = (
    "SELECT count(*) FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id"
    " WHERE c.queue = 'acc_qcap' AND m.lease_until IS NOT NULL"
)


def test_three_processes_of_four_threads_over_100_channels_run_exactly_3_at_once(spawn, db):
    api.configure_queue(QUEUE, max_concurrency=3)
    db.track_inflight(IN_FLIGHT)
    sent = enqueue_many(
        QUEUE, [Item({"seconds": 0.05}, channel=f"tenant-{n:03d}") for n in range(100) for _ in range(2)]
    )

    workers = [
        spawn("--queue", QUEUE, "--burst", "--concurrency", "4", settings=SETTINGS, label=f"worker {n}")
        for n in range(3)
    ]
    codes = [w.wait(timeout=120) for w in workers]

    assert codes == [0, 0, 0], describe(*workers)
    done = db.events("done", QUEUE)
    assert Counter(d["message_id"] for d in done) == Counter(sent), describe(*workers)
    peak = db.rows("SELECT * FROM testapp_inflight WHERE channel = %s", [IN_FLIGHT])[0]
    assert peak["peak"] == 3, f"queue cap 3, handlers at once at most {peak['peak']}\n{describe(*workers)}"
    assert peak["now"] == 0
    assert len({d["pid"] for d in db.events("start", QUEUE)}) >= 2, "only one process did work"
    assert db.scalar("SELECT in_flight FROM lonnymq_queue_config WHERE queue = %s", [QUEUE]) == 0
    assert api.check() == []


def test_sigkill_mid_job_gives_the_queue_slots_back_after_the_lease(spawn, db, connect):
    api.configure_queue(QUEUE, max_concurrency=3)
    db.track_inflight(IN_FLIGHT)
    slow = enqueue_many(QUEUE, [Item({"first_seconds": 60}, channel=f"slow-{n}") for n in range(3)])
    quick = enqueue_many(QUEUE, [Item({"seconds": 0.02}, channel=f"quick-{n}") for n in range(20)])

    # A watcher counts leased messages of the queue, each count from one snapshot.
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        conn = connect()
        while not stop.is_set():
            seen.append(conn.execute(LEASED).fetchone()[0])
            stop.wait(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        victim = spawn(
            "--queue", QUEUE, "--lease", "2s", "--concurrency", "4", settings=SETTINGS, label="victim"
        )
        wait_until(lambda: len(db.events("start", QUEUE)) >= 3, 15, "three slow handlers to start", victim)
        starts = db.events("start", QUEUE)
        assert sorted(s["message_id"] for s in starts) == sorted(slow), describe(victim)
        # The cap holds: a fourth thread of the victim is free, yet nothing else starts.
        assert db.scalar("SELECT in_flight FROM lonnymq_queue_config WHERE queue = %s", [QUEUE]) == 3

        victim.signal(signal.SIGKILL)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        rescuers = [
            spawn("--queue", QUEUE, "--burst", "--lease", "2s", "--concurrency", "4", settings=SETTINGS,
                  label=f"rescuer {n}")
            for n in range(2)
        ]  # fmt: skip
        codes = [r.wait(timeout=60) for r in rescuers]
    finally:
        stop.set()
        watcher.join()

    assert codes == [0, 0], describe(victim, *rescuers)
    done = Counter(d["message_id"] for d in db.events("done", QUEUE))
    assert done == Counter(slow + quick), describe(victim, *rescuers)
    assert sum(r.stats()["reaped"] for r in rescuers) >= 1, describe(*rescuers)
    assert max(seen) == 3, f"leases at once: at most {max(seen)}"
    assert db.messages(QUEUE) == [] and db.dead(QUEUE) == []
    assert db.scalar("SELECT in_flight FROM lonnymq_queue_config WHERE queue = %s", [QUEUE]) == 0
    assert api.check() == []
