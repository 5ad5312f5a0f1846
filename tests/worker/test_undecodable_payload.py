"""A message whose payload the worker cannot decode fails alone.

Payloads deeper than ``bounds.MAX_PAYLOAD_DEPTH`` are refused at enqueue, but rows written
before that rule, or straight into the table, still exist. Python's json stops near 1,000
levels: such a row is dead-lettered (reason ``discarded``, "payload cannot be decoded: ..."),
its batch-mates run as usual, and the worker keeps running.
"""

from __future__ import annotations

from django_lonnymq import Item, enqueue_many
from tests.worker.conftest import describe

DEPTH = 3000
DEEP = f"(repeat('[', {DEPTH}) || repeat(']', {DEPTH}))::jsonb"


def make_undecodable(db, message_id: int) -> None:
    """A payload nested deeper than Python's json decodes, written past every check."""
    db.rows(f"UPDATE lonnymq_message SET payload = {DEEP} WHERE id = %s", [message_id])


def test_an_undecodable_payload_fails_alone_and_the_worker_goes_on(spawn, db):
    ids = enqueue_many("t_record", [Item({"n": n}, channel=f"c{n}") for n in range(10)])
    poison = ids[4]
    make_undecodable(db, poison)

    worker = spawn("--queue", "t_record", "--batch-size", "10", "--concurrency", "2", "--burst")
    assert worker.wait(60) == 0, describe(worker)

    done = sorted(d["message_id"] for d in db.events("done", "t_record"))
    assert done == sorted(set(ids) - {poison}), describe(worker)
    [dead] = db.rows(
        "SELECT id, reason, attempts, last_error FROM lonnymq_dead_message WHERE queue = 't_record'"
    )
    assert (dead["id"], dead["reason"], dead["attempts"]) == (poison, "discarded", 1), dead
    assert dead["last_error"].startswith("payload cannot be decoded: "), dead["last_error"]
    assert "RecursionError" in dead["last_error"] or "recursion" in dead["last_error"], dead["last_error"]
    assert db.scalar("SELECT count(*) FROM lonnymq_message") == 0
    stats = worker.stats()
    assert (stats["acked"], stats["dead"]) == (9, 1), describe(worker)
    assert "Traceback" not in worker.output, describe(worker)
    assert f"message {poison} of t_record: payload cannot be decoded" in worker.output, describe(worker)
