"""LISTEN/NOTIFY wakes an idle worker at once (the poll interval here is 30 s)."""

from __future__ import annotations

import time

from django_lonnymq import enqueue
from tests.worker.conftest import describe, wait_idle, wait_until

SLOW_POLL = "tests.worker.settings_slowpoll"  # LONNYMQ_POLL_INTERVAL = 30


def test_enqueue_wakes_an_idle_worker_within_seconds(spawn, db):
    worker = spawn("--queue", "t_record", settings=SLOW_POLL)
    wait_idle(db, worker)
    time.sleep(0.3)  # well into its 30 s sleep

    latencies = []
    for n in range(3):  # alternately from Django (api.enqueue) and a raw connection (SQL)
        before = len(db.events("done", "t_record"))
        enqueued = time.monotonic()
        if n % 2 == 0:
            enqueue("t_record", {"n": n}, channel=f"c{n}")
        else:
            db.scalar("SELECT lonnymq_enqueue_v1('t_record', %s, %s::jsonb)", [f"c{n}", f'{{"n": {n}}}'])
        wait_until(
            lambda b=before: len(db.events("done", "t_record")) > b,
            10,
            f"message {n} handled",
            worker,
            interval=0.01,
        )
        latencies.append(time.monotonic() - enqueued)
        wait_idle(db, worker)
        time.sleep(0.3)

    assert worker.stop() == 0, describe(worker)
    assert max(latencies) < 5, f"woken by polling, not NOTIFY: {latencies}\n{describe(worker)}"
    assert len(db.events("done", "t_record")) == 3
