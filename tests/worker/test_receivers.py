"""Signal receivers in a real worker: a slow ``message_finished`` receiver holds up neither the
leases nor the acks (receivers run on a thread of their own), and a receiver that uses the
database keeps working after the worker's connections were lost (they are recycled as Django
does after a request)."""

from __future__ import annotations

from django.db import connection

from django_lonnymq import Item, enqueue_many
from tests.worker.conftest import describe, wait_until

QUEUE = "acc_receivers"
SETTINGS = "tests.worker.settings_receivers"


def received(db) -> list[dict]:
    return [d for d in db.deliveries(QUEUE) if d["event"].startswith("received:")]


def test_a_slow_receiver_holds_up_no_lease_and_no_ack(spawn, db):
    """A 12 s receiver with a 2 s lease: every message is acked once, none expires or runs twice."""
    first = enqueue_many(QUEUE, [Item({"receiver_seconds": 12}, channel="slow")])
    worker = spawn(
        "--queue",
        QUEUE,
        "--concurrency",
        "2",
        "--lease",
        "2s",
        "--shutdown-timeout",
        "20s",
        settings=SETTINGS,
    )
    wait_until(lambda: received(db), 15, "the slow receiver to start", worker)

    # While that receiver sleeps, later messages run and are acked, and nothing expires.
    later = enqueue_many(QUEUE, [Item({"n": n}, channel=f"c{n}") for n in range(6)])
    wait_until(lambda: not db.messages(QUEUE), 10, "every message to be acked meanwhile", worker)
    wait_until(lambda: len(received(db)) == 7, 20, "every receiver to run", worker)

    starts = [d["message_id"] for d in db.events("start", QUEUE)]
    assert sorted(starts) == sorted(first + later), f"a message ran twice or never\n{describe(worker)}"
    assert {d["event"] for d in received(db)} == {"received:acked"}, received(db)
    assert db.dead(QUEUE) == []
    assert "expired" not in worker.output, describe(worker)
    assert worker.stop(sig=15) == 0, describe(worker)


def test_a_receiver_using_the_database_survives_a_lost_connection(spawn, db):
    worker = spawn("--queue", QUEUE, "--concurrency", "2", settings=SETTINGS)
    before = enqueue_many(QUEUE, [Item({"n": n}) for n in range(5)])
    wait_until(lambda: len(received(db)) == 5, 20, "5 receivers before the loss", worker)

    # Every connection of the worker process goes: its control connection, and any Django
    # connection a receiver left open.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (own,) = cursor.fetchone()
    killed = db.scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_type = 'client backend' AND pid NOT IN (pg_backend_pid(), %s)",
        [own],
    )
    assert killed >= 1, "the worker's control connection at least"

    after = enqueue_many(QUEUE, [Item({"n": n}) for n in range(5, 10)])
    wait_until(lambda: len(received(db)) == 10, 30, "5 receivers after the loss", worker)
    assert sorted(d["message_id"] for d in received(db)) == sorted(before + after)
    assert worker.alive(), describe(worker)
    assert worker.stop(sig=15) == 0, describe(worker)
