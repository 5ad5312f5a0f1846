"""Strict order in a real worker process: in an ordered channel a failing message holds the
ones after it until it succeeds (they run after it, in order), a dead one holds the channel
until requeued, and another channel keeps flowing meanwhile."""

from __future__ import annotations

from django_lonnymq import api, enqueue_many

from .conftest import describe, wait_until

SETTINGS = "tests.worker.settings_asks"
QUEUE = "acc_ordered"


def runs(db, channel):
    return [
        (d["payload"]["n"], d["attempt"])
        for d in db.rows(
            "SELECT payload, attempt FROM testapp_delivery WHERE queue = %s AND channel = %s ORDER BY id",
            [QUEUE, channel],
        )
    ]


def test_a_failing_message_holds_the_ones_after_it_and_a_dead_one_until_requeued(spawn, db):
    api.configure_channel(QUEUE, "acme", ordered=True)
    enqueue_many(QUEUE, [{"n": 1, "fail": 2}, {"n": 2}, {"n": 3, "fail": 3}, {"n": 4}], channel="acme",
                 max_attempts=3)  # fmt: skip
    enqueue_many(QUEUE, [{"n": n} for n in range(1, 21)], channel="globex")
    worker = spawn("--queue", QUEUE, "--concurrency", "4", settings=SETTINGS)
    # 1 fails twice and succeeds on its third attempt; 2 waits for it; 3 dies (3 attempts)
    # and blocks 4; globex's 20 run meanwhile, in parallel.
    wait_until(lambda: len(runs(db, "acme")) >= 6 and len(runs(db, "globex")) == 20, 30, "the runs", worker)
    wait_until(lambda: api.blocked_channels(QUEUE), 10, "acme to be blocked", worker)
    assert runs(db, "acme") == [(1, 1), (1, 2), (1, 3), (2, 1), (3, 1), (3, 2), (3, 3)], describe(worker)
    [blocked] = api.blocked_channels(QUEUE)
    assert blocked.channel == "acme" and "attempt 3 of message 3 fails" in blocked.last_error
    # The fourth waits behind the dead third until an operator brings it back.
    assert api.requeue_dead([blocked.message_id], reset_attempts=False) == [blocked.message_id]
    wait_until(lambda: (4, 1) in runs(db, "acme"), 10, "the fourth to run", worker)
    assert runs(db, "acme")[-2:] == [(3, 4), (4, 1)], describe(worker)
