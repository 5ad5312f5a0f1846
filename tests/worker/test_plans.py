"""A plan change reaches every channel of the plan while real workers drain, and a channel's
concurrency cap holds across it."""

from __future__ import annotations

import time

from django_lonnymq import Item, api, enqueue_many
from django_lonnymq.models import Channel
from tests.worker.conftest import describe

CHANNELS = 10_000
HOT = 40  # channels the workers drain, with a backlog each: the cap matters there


def test_a_plan_change_reaches_10000_channels_while_four_workers_drain(spawn, db):
    api.configure_plan("tier", max_concurrency=1)
    api.configure_queue("t_sleep", default_plan="tier")
    api.configure_queue("t_plan_idle", default_plan="tier")  # a queue no worker serves
    hot = [f"hot-{n}" for n in range(HOT)]
    db.track_inflight(*hot)
    enqueue_many("t_plan_idle", [Item(n, channel=f"idle-{n}") for n in range(CHANNELS - HOT)])
    sent = enqueue_many("t_sleep", [Item({"seconds": 0.3}, channel=name) for name in hot for _ in range(8)])
    assert Channel.objects.filter(plan__name="tier").count() == CHANNELS

    workers = [
        spawn("--queue", "t_sleep", "--burst", "--concurrency", "4", label=f"worker {n}") for n in range(4)
    ]
    deadline = time.monotonic() + 60
    while len(db.events("done", "t_sleep")) < HOT and time.monotonic() < deadline:
        time.sleep(0.05)
    before = {r["channel"]: r["peak"] for r in db.rows("SELECT * FROM testapp_inflight")}
    assert max(before.values()) == 1, f"the cap of 1 did not hold before the change: {before}"

    started = time.monotonic()
    changed = api.configure_plan("tier", max_concurrency=2, weight=3)
    took = time.monotonic() - started
    assert changed == CHANNELS
    # A tail that one channel holds alone: with 16 slots and 40 busy channels a worker may
    # never have taken two of one channel at once (a run on a throwaway cluster did not).
    # A fifth worker, started after the change and the tail, finds the tail even when the
    # others drained everything during the change and left (burst); a worker with two free
    # slots finds only hot-0 and takes two.
    sent += enqueue_many("t_sleep", [Item({"seconds": 0.3}, channel="hot-0") for _ in range(12)])
    workers.append(spawn("--queue", "t_sleep", "--burst", "--concurrency", "4", label="worker 4"))

    codes = [w.wait(timeout=120) for w in workers]
    assert codes == [0] * 5, describe(*workers)
    assert len(db.events("done", "t_sleep")) == len(sent), describe(*workers)
    # Every channel of the plan shows the new limits, and none drifted.
    assert not Channel.objects.filter(plan__name="tier").exclude(max_concurrency=2, weight=3).exists()
    assert api.check() == []
    after = {r["channel"]: r for r in db.rows("SELECT * FROM testapp_inflight")}
    assert max(r["peak"] for r in after.values()) <= 2, f"the cap of 2 was exceeded: {after}"
    # The test could have failed: the new cap was used (a channel ran two at once).
    assert max(r["peak"] for r in after.values()) == 2, f"the new cap was never reached: {after}"
    assert all(r["now"] == 0 for r in after.values())
    assert all(db.channel("t_sleep", name)["in_flight"] == 0 for name in hot)
    assert took < 30, f"the plan change took {took:.1f} s"
