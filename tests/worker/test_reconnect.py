"""A worker whose database connection is killed mid-run reconnects and loses nothing."""

from __future__ import annotations

import logging
from collections import Counter

import psycopg

from django_lonnymq import Item, api, enqueue, enqueue_many, handler
from django_lonnymq.registry import unregister
from django_lonnymq.worker import Worker
from tests.worker.conftest import describe, proxied_database_url, run_in_thread, wait_until

TERMINATE = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
    " WHERE datname = current_database() AND application_name = %s"
)


def test_terminated_backend_is_reconnected_and_every_message_finishes(spawn, db):
    db.track_inflight(*(f"c{k}" for k in range(3)))
    ids = enqueue_many("t_sleep", [Item({"seconds": 0.1}, channel=f"c{n % 3}") for n in range(30)])

    worker = spawn("--queue", "t_sleep", "--burst", "--concurrency", "3")
    killed = 0
    for target in (5, 15):  # kill the control connection twice, mid-run
        wait_until(lambda t=target: len(db.events("done", "t_sleep")) >= t, 20, f"{target} done", worker)
        wait_until(lambda: db.backend(worker), 10, "the worker's connection", worker)
        killed += sum(
            1 for row in db.rows(TERMINATE, [worker.application_name]) if row["pg_terminate_backend"]
        )
    assert killed == 2
    code = worker.wait(timeout=30)

    assert code == 0, describe(worker)
    done = Counter(d["message_id"] for d in db.events("done", "t_sleep"))
    assert sorted(done) == sorted(ids), f"lost: {sorted(set(ids) - set(done))}\n{describe(worker)}"
    assert set(done.values()) == {1}, (
        f"ran twice: {[i for i, n in done.items() if n > 1]}\n{describe(worker)}"
    )
    assert db.messages("t_sleep") == [] and db.dead("t_sleep") == []
    stats = worker.stats()
    assert stats["reconnects"] >= 2, describe(worker)
    assert stats["acked"] == 30 and stats["lease_lost"] == 0, describe(worker)
    assert "lost the database connection" in worker.output
    assert "Traceback" not in worker.output, worker.output
    assert api.check() == []


def test_network_cut_mid_run_loses_nothing(spawn, db, proxy):
    """Every connection of the worker (control and handler threads) drops twice mid-run: the
    handlers that lose theirs fail and are retried; every message is still handled."""
    db.track_inflight(*(f"c{k}" for k in range(3)))
    ids = enqueue_many("t_sleep", [Item({"seconds": 0.1}, channel=f"c{n % 3}") for n in range(30)])
    proxy.open()

    worker = spawn("--queue", "t_sleep", "--concurrency", "3", DATABASE_URL=proxied_database_url(proxy))
    for target in (5, 15):
        wait_until(lambda t=target: len(db.events("done", "t_sleep")) >= t, 20, f"{target} done", worker)
        assert proxy.cut() >= 1
    # Not --burst: a handler that lost its connection is retried after a backoff.
    wait_until(lambda: not db.messages("t_sleep"), 40, "every message to be acked", worker)
    assert worker.stop() == 0, describe(worker)

    done = {d["message_id"] for d in db.events("done", "t_sleep")}
    assert sorted(done) == sorted(ids), f"lost: {sorted(set(ids) - done)}\n{describe(worker)}"
    assert db.dead("t_sleep") == []
    assert worker.stats()["reconnects"] >= 1, describe(worker)
    db.rows("UPDATE testapp_inflight SET now = 0")  # handlers cut mid-way never counted out
    assert api.check() == []


def test_ack_whose_reply_was_lost_counts_as_acked_not_as_a_lost_lease(db, caplog):
    """In-process: the connection drops after the server committed an ack but before the
    reply arrived. The worker re-sends the ack after reconnecting; the message is already gone
    because *its own* ack removed it, so this is an ack, not an expired lease."""
    queue = "acc_ack_reply_lost"
    handler(queue)(lambda message: None)
    try:
        message_id = enqueue(queue, {"k": 1})
        worker = Worker([queue], concurrency=1, burst=True)
        execute = worker.connection.run
        cut = []

        def reply_lost_after_first_ack(name, params=None):
            rows = execute(name, params)
            if name == "ack" and not cut:
                cut.append(rows)
                raise psycopg.OperationalError("server closed the connection unexpectedly (simulated)")
            return rows

        worker.connection.run = reply_lost_after_first_ack  # every statement of the worker goes through it
        with caplog.at_level(logging.INFO, logger="django_lonnymq"):
            stats = run_in_thread(worker)
    finally:
        unregister(queue)

    assert cut and message_id in cut[0][0][0], "the first ack did not commit"
    assert db.messages(queue) == []
    assert stats.reconnects == 1, stats.summary()
    warnings = [r.getMessage() for r in caplog.records if "expired before it finished" in r.getMessage()]
    assert (stats.acked, stats.lease_lost, warnings) == (1, 0, []), (
        f"an ack whose reply was lost is reported as a lost lease: {stats.summary()} {warnings}"
    )
