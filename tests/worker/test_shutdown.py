"""SIGTERM/SIGINT: stop fetching, let running handlers finish, exit 0; what never started
stays ready with its attempt uncounted."""

from __future__ import annotations

import signal
import time

import pytest

from django_lonnymq import api, enqueue, enqueue_many
from tests.worker.conftest import describe, wait_until


@pytest.mark.parametrize(
    ("sig", "batch"),
    [(signal.SIGTERM, "2"), (signal.SIGINT, "2"), (signal.SIGTERM, "5")],
    ids=["SIGTERM", "SIGINT", "SIGTERM-batch-5"],
)
def test_signal_lets_running_handlers_finish_and_exits_0(spawn, db, sig, batch):
    """With --batch-size above --concurrency, leased messages wait for a free thread; those
    are released on shutdown without counting an attempt."""
    db.track_inflight("default")
    ids = enqueue_many("t_sleep", [{"seconds": 1.0, "n": n} for n in range(7)])

    worker = spawn("--queue", "t_sleep", "--concurrency", "2", "--batch-size", batch)
    wait_until(lambda: len(db.events("start", "t_sleep")) == 2, 15, "two handlers to start", worker)
    started = {d["message_id"] for d in db.events("start", "t_sleep")}
    signalled = time.monotonic()
    worker.signal(sig)
    code = worker.wait(timeout=15)
    took = time.monotonic() - signalled

    assert code == 0, describe(worker)
    assert took < 10, f"took {took:.1f}s to stop\n{describe(worker)}"
    done = {d["message_id"] for d in db.events("done", "t_sleep")}
    assert done == started, (
        f"running handlers did not finish: started={started} done={done}\n{describe(worker)}"
    )
    assert {d["message_id"] for d in db.events("start", "t_sleep")} == started, (
        "started new work after the signal"
    )
    left = db.messages("t_sleep")
    assert sorted(m["id"] for m in left) == sorted(set(ids) - started)
    for message in left:
        assert message["lease_until"] is None and message["lease_token"] is None, message
        assert message["attempts"] == 0, message
    assert db.scalar("SELECT now FROM testapp_inflight WHERE channel = 'default'") == 0
    stats = worker.stats()
    assert stats["acked"] == 2 and stats["fetched"] - stats["released"] == 2, describe(worker)
    assert api.check() == []
    # The rest is still served by the next worker.
    after = spawn("--queue", "t_sleep", "--burst", "--concurrency", "5", label="next worker")
    assert after.wait(timeout=20) == 0, describe(after)
    assert db.messages("t_sleep") == []


def test_shutdown_timeout_bounds_the_wait_and_the_lease_brings_the_message_back(spawn, db):
    db.track_inflight("default")
    message_id = enqueue("t_sleep", {"seconds": 60})

    worker = spawn("--queue", "t_sleep", "--lease", "2s", "--shutdown-timeout", "1s")
    wait_until(lambda: db.events("start", "t_sleep"), 15, "the handler to start", worker)
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    code = worker.wait(timeout=15)

    assert code == 0, describe(worker)
    assert time.monotonic() - signalled < 5, describe(worker)
    assert "still running" in worker.output, describe(worker)
    assert not db.events("done", "t_sleep")
    # Nobody heartbeats it any more: once the lease runs out the message is ready again.
    [message] = db.messages("t_sleep")
    assert message["lease_until"] is not None and message["attempts"] == 1
    wait_until(
        lambda: api.reap() or db.messages("t_sleep")[0]["lease_until"] is None,
        10,
        "the expired lease to be reaped",
        worker,
    )
    [message] = db.messages("t_sleep")
    assert message["id"] == message_id and message["lease_until"] is None and message["attempts"] == 1, (
        message
    )
    assert db.channel("t_sleep")["in_flight"] == 0
    assert api.check() == []
