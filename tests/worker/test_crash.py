"""A worker killed with SIGKILL mid-handler: its lease expires, another worker's reaper puts the
message back, it is delivered again, and the channel's concurrency slot comes back."""

from __future__ import annotations

import signal

from django_lonnymq import api, enqueue
from tests.worker.conftest import describe, wait_until

SETTINGS = "tests.worker.settings_extra"


def test_sigkill_mid_handler_redelivers_and_frees_the_slot(spawn, db):
    api.configure_channel("acc_crash", "solo", max_concurrency=1)
    db.track_inflight("solo")
    first = enqueue("acc_crash", {"first_seconds": 30}, channel="solo")
    second = enqueue("acc_crash", {"seconds": 0.05}, channel="solo")

    victim = spawn(
        "--queue", "acc_crash", "--lease", "2s", "--concurrency", "2", settings=SETTINGS, label="victim"
    )
    wait_until(lambda: db.events("start", "acc_crash"), 15, "the first handler to start", victim)
    starts = db.events("start", "acc_crash")
    assert [(s["message_id"], s["pid"]) for s in starts] == [(first, victim.pid)], describe(victim)
    # The cap holds: the second message waits although the victim has a free thread.
    assert db.channel("acc_crash", "solo")["in_flight"] == 1

    victim.signal(signal.SIGKILL)
    assert victim.wait(timeout=10) == -signal.SIGKILL
    # The killed handler never counted itself out of testapp_inflight: start counting afresh.
    db.rows("UPDATE testapp_inflight SET now = 0, peak = 0")
    leased = db.messages("acc_crash")[0]
    assert leased["id"] == first and leased["lease_until"] is not None, leased

    rescuer = spawn("--queue", "acc_crash", "--burst", "--lease", "2s", settings=SETTINGS, label="rescuer")
    code = rescuer.wait(timeout=30)  # burst: waits for the in-flight lease, then drains

    assert code == 0, describe(victim, rescuer)
    deliveries = [(d["message_id"], d["attempt"], d["event"], d["pid"]) for d in db.deliveries("acc_crash")]
    assert deliveries == [
        (first, 1, "start", victim.pid),
        (first, 2, "start", rescuer.pid),
        (first, 2, "done", rescuer.pid),
        (second, 1, "start", rescuer.pid),
        (second, 1, "done", rescuer.pid),
    ], describe(victim, rescuer)
    assert rescuer.stats()["reaped"] >= 1, describe(rescuer)
    assert db.messages("acc_crash") == []  # nothing lost, nothing left
    assert db.dead("acc_crash") == []
    assert db.channel("acc_crash", "solo")["in_flight"] == 0
    assert db.scalar("SELECT peak FROM testapp_inflight WHERE channel = 'solo'") == 1
    assert api.check() == []
