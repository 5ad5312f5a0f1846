"""A handler that runs longer than the lease keeps its message: the worker's heartbeat
extends the lease, so another worker's reaper never takes it over."""

from __future__ import annotations

import pytest

from django_lonnymq import enqueue
from tests.worker.conftest import describe, wait_idle, wait_until


@pytest.mark.parametrize(
    "settings",
    [
        "tests.worker.settings_extra",
        # A long poll interval must not delay the heartbeat of a worker with idle threads.
        "tests.worker.settings_slowpoll",
    ],
    ids=["poll-0.2s", "poll-30s"],
)
def test_handler_longer_than_the_lease_is_not_redelivered(spawn, db, settings):
    db.track_inflight("default")
    holder = spawn(
        "--queue", "t_sleep", "--lease", "1s", "--concurrency", "2", settings=settings, label="holder"
    )
    wait_idle(db, holder)
    message_id = enqueue("t_sleep", {"seconds": 3})
    wait_until(lambda: db.events("start", "t_sleep"), 10, "the handler to start", holder)
    # A second worker whose reaper (every 0.5 s) would take the message over if its lease ran out.
    rival = spawn(
        "--queue", "t_sleep", "--lease", "1s", settings="tests.worker.settings_extra", label="rival"
    )

    wait_until(lambda: db.events("done", "t_sleep"), 15, "the handler to finish", holder, rival)
    wait_until(lambda: not db.messages("t_sleep"), 5, "the ack", holder, rival)
    assert holder.stop() == 0 and rival.stop() == 0, describe(holder, rival)

    starts = db.events("start", "t_sleep")
    assert [(s["message_id"], s["pid"]) for s in starts] == [(message_id, holder.pid)], (
        f"delivered again while its handler ran: {starts}\n{describe(holder, rival)}"
    )
    assert holder.stats()["lease_lost"] == 0 and holder.stats()["acked"] == 1, describe(holder)
    assert rival.stats()["reaped"] == 0, describe(rival)
    assert "was lost" not in holder.output and "expired before" not in holder.output, describe(holder)
