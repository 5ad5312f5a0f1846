"""Message.extend_lease() from a handler, in-process: it moves the lease, and raises LeaseLost
once the lease went to another worker (whose ack then wins; the stale worker's ack is refused)."""

from __future__ import annotations

from typing import Any

import pytest

from django_lonnymq import Message, api, enqueue, handler, sql
from django_lonnymq.exceptions import LeaseLost
from django_lonnymq.registry import unregister
from django_lonnymq.worker import Worker
from tests.worker.conftest import DB, run_in_thread

QUEUE = "acc_extend"


@pytest.fixture
def registered():
    seen: dict[str, Any] = {}
    yield seen
    unregister(QUEUE)


def test_extend_lease_moves_the_lease_and_raises_lease_lost_when_stale(db: DB, registered: dict[str, Any]):
    def lease_left_ms(message_id: int) -> int:
        return db.scalar(
            "SELECT lease_until - lonnymq_now_ms_v1() FROM lonnymq_message WHERE id = %s", [message_id]
        )

    @handler(QUEUE)
    def extend_then_lose(message: Message) -> None:
        registered["initial"] = lease_left_ms(message.id)
        message.extend_lease(20)
        registered["after_20s"] = lease_left_ms(message.id)
        message.extend_lease()  # the worker's own lease
        registered["after_default"] = lease_left_ms(message.id)

        # Another worker takes the message over: its lease expires and is reaped (one
        # transaction, so this worker's heartbeat cannot slip in between), then it is leased again.
        with db.conn.transaction():
            db.rows(
                "UPDATE lonnymq_message SET lease_until = lonnymq_now_ms_v1() - 1 WHERE id = %s", [message.id]
            )
            db.rows(sql.query("reap"), {"limit": 10, "dedup_window_ms": 86_400_000, "tolerance_ms": 50})
        [thief] = db.rows(
            sql.query("dequeue"),
            {"queue": QUEUE, "batch_size": 1, "lease_ms": 30_000, "worker": "thief", "tolerance_ms": 50},
        )
        registered["thief"] = thief
        try:
            message.extend_lease(20)
        except LeaseLost as exc:
            registered["lost"] = exc
        registered["after_lost"] = lease_left_ms(message.id)
        acked = db.scalar(sql.query("ack"), {"ids": [thief["id"]], "tokens": [thief["lease_token"]]})
        registered["thief_acked"] = acked

    message_id = enqueue(QUEUE, {"k": 1})
    worker = Worker([QUEUE], concurrency=1, lease=5, burst=True)
    stats = run_in_thread(worker)

    assert 4_000 <= registered["initial"] <= 5_000, registered
    assert 19_000 <= registered["after_20s"] <= 20_000, registered
    assert 4_000 <= registered["after_default"] <= 5_000, registered
    assert registered["thief"]["id"] == message_id and registered["thief"]["attempts"] == 2
    lost = registered.get("lost")
    assert isinstance(lost, LeaseLost), f"extend with a stale lease was not refused: {registered}"
    assert lost.ids == [message_id] and str(message_id) in str(lost)
    assert 29_000 <= registered["after_lost"] <= 30_000, "the stale extend moved the thief's lease"
    assert registered["thief_acked"] == [message_id]
    assert stats.lease_lost == 1 and stats.acked == 0, stats.summary()
    assert db.messages(QUEUE) == [] and db.dead(QUEUE) == []
    assert api.check() == []


def test_extend_lease_outside_a_worker_is_refused():
    message = Message(
        id=1, queue=QUEUE, channel="default", payload={}, attempt=1, max_attempts=1, enqueued_at=None
    )  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="no lease"):
        message.extend_lease()
