"""Pruning never races an enqueue into a lost message or a lost wake-up (docs/locking.md,
"Pruning a channel").

Producers enqueue into a few channel names, one batch per transaction, some held open a
moment, some rolled back; pruners delete every channel idle for 1 ms, as fast as they can;
dequeuers lease and ack. So channels vanish and come back all the time, under producers that
looked them up a moment before. At the end, with producers stopped, the dequeuers drain:
every committed message is delivered exactly once, no rolled-back one is, the scheduler's
invariants hold, every channel can be pruned, and the queue's release count equals the
deliveries exactly (pruning folds it, never loses it). An enqueue that looked its channel up
just before the prune deleted it fails with the foreign-key error (SQLSTATE 23503, raised by
lonnymq_hold_channels_v1 since the key itself went in 0036) and nothing written; the
producer retries it, as a caller would. The producers call the live enqueue functions and
the superseded ones still installed, half and half; the final check also finds no message
whose channel is missing ('orphaned').
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from typing import Any

import psycopg
import pytest

from tests.sql.concurrency import sqlcalls as q

# django_independent: SQL through psycopg only; Django only makes the test database (CONTRIBUTING.md)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.django_independent]

QUEUE = "churn"
NAMES = [f"key-{i}" for i in range(12)]
FOREIGN_KEY = "23503"
RETRYABLE = {FOREIGN_KEY, q.SERIALIZATION_FAILURE}


def _seconds() -> float:
    return float(os.environ.get("LONNYMQ_PRUNE_RACE_SECONDS", "8"))


class Ledger:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.committed: set[int] = set()
        self.rolled_back: set[int] = set()
        self.delivered: list[int] = []
        self.pruned = 0
        self.retried: Counter[str] = Counter()
        self.errors: list[str] = []


def _enqueue_v2(conn: psycopg.Connection[Any], channel: str) -> list[int]:
    """The live single enqueue (the app's), beside sqlcalls' lonnymq_enqueue_v1."""
    row = conn.execute(
        "SELECT lonnymq_enqueue_v2(%s, %s, %s::jsonb)", [QUEUE, channel, json.dumps({"c": channel})]
    )
    return [int(row.fetchone()[0])]


def _enqueue_many_v2(conn: psycopg.Connection[Any], channels: list[str]) -> list[int]:
    """The live batch (the app's enqueue_many), beside sqlcalls' superseded lonnymq_enqueue_many_v1."""
    row = conn.execute(
        "SELECT lonnymq_enqueue_many_v2(%s, %s::text[], %s::jsonb[])",
        [QUEUE, channels, [json.dumps({"c": c}) for c in channels]],
    ).fetchone()
    return [int(i) for i in row[0]]


def _produce(
    conn: psycopg.Connection[Any], rng: random.Random, stop: threading.Event, ledger: Ledger
) -> None:
    # Every function with an INSERT INTO lonnymq_message that a producer of new messages
    # calls here holds its channels itself (no foreign key since 0036): the superseded v1
    # functions still installed and the live v2 ones alike.
    while not stop.is_set():
        channels = [rng.choice(NAMES) for _ in range(rng.randint(1, 3))]
        live = rng.random() < 0.5
        try:
            if len(channels) == 1 and rng.random() < 0.5:
                ids = (
                    _enqueue_v2(conn, channels[0])
                    if live
                    else [q.enqueue(conn, QUEUE, channels[0], {"c": channels[0]})]
                )
            elif live:
                ids = _enqueue_many_v2(conn, channels)
            else:
                ids = q.enqueue_many(conn, QUEUE, channels, [{"c": c} for c in channels])
            if rng.random() < 0.3:
                time.sleep(rng.random() * 0.005)  # an open producer: its channels are held
            if rng.random() < 0.1:
                conn.rollback()
                with ledger.lock:
                    ledger.rolled_back.update(ids)
            else:
                conn.commit()
                with ledger.lock:
                    ledger.committed.update(ids)
        except psycopg.Error as exc:
            conn.rollback()
            with ledger.lock:
                if exc.sqlstate in RETRYABLE:
                    ledger.retried[exc.sqlstate] += 1
                else:
                    ledger.errors.append(f"producer: {exc.sqlstate} {exc}")


def _prune(conn: psycopg.Connection[Any], stop: threading.Event, ledger: Ledger) -> None:
    while not stop.is_set():
        try:
            row = conn.execute("SELECT lonnymq_prune_channels_v1(1, 5)").fetchone()
        except psycopg.Error as exc:
            with ledger.lock:
                ledger.errors.append(f"pruner: {exc.sqlstate} {exc}")
            return
        with ledger.lock:
            ledger.pruned += int(row[0]) if row else 0


def _dequeue(
    conn: psycopg.Connection[Any], rng: random.Random, stop: threading.Event, ledger: Ledger
) -> None:
    while not stop.is_set():
        try:
            leased = q.dequeue(conn, QUEUE, batch=rng.randint(1, 10))
            if leased:
                acked = q.ack(conn, leased)
                with ledger.lock:
                    ledger.delivered.extend(acked)
            else:
                time.sleep(0.002)
        except psycopg.Error as exc:
            with ledger.lock:
                ledger.errors.append(f"dequeuer: {exc.sqlstate} {exc}")
            return


def _released_total(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT released_total FROM lonnymq_queue_stats_v2(%s::text[])", [[QUEUE]]).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_enqueues_into_channels_being_pruned_lose_no_message_and_no_wake_up(connect: Any) -> None:
    ledger = Ledger()
    stop, drained = threading.Event(), threading.Event()
    seed = random.randrange(1 << 30)
    producers = [
        threading.Thread(
            target=_produce, args=(connect(autocommit=False), random.Random(seed + i), stop, ledger)
        )
        for i in range(4)
    ]
    pruners = [threading.Thread(target=_prune, args=(connect(), stop, ledger)) for _ in range(2)]
    dequeuers = [
        threading.Thread(target=_dequeue, args=(connect(), random.Random(seed + 100 + i), drained, ledger))
        for i in range(2)
    ]
    for thread in producers + pruners + dequeuers:
        thread.start()
    time.sleep(_seconds())
    stop.set()
    for thread in producers + pruners:
        thread.join(30)

    # Producers and pruners stopped: the dequeuers must drain everything committed, through
    # the turns and wake-up marks alone (a lost wake-up would leave a message behind).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with ledger.lock:
            if set(ledger.delivered) >= ledger.committed:
                break
        time.sleep(0.05)
    time.sleep(0.2)
    drained.set()
    for thread in dequeuers:
        thread.join(30)

    admin = connect()
    summary = (
        f"seed={seed} committed={len(ledger.committed)} delivered={len(ledger.delivered)} "
        f"pruned={ledger.pruned} retried={dict(ledger.retried)}"
    )
    assert ledger.errors == [], summary
    assert len(ledger.committed) > 100 and ledger.pruned > 20, summary
    counts = Counter(ledger.delivered)
    assert [i for i, n in counts.items() if n > 1] == [], f"delivered twice; {summary}"
    assert set(counts) == ledger.committed, f"lost {sorted(ledger.committed - set(counts))[:10]}; {summary}"
    assert not set(counts) & ledger.rolled_back, summary
    assert q.check(admin, grace_ms=0) == [], summary
    assert admin.execute("SELECT count(*) FROM lonnymq_message").fetchone() == (0,), summary

    # Every channel is empty and idle: all can go once a dequeue has parked them, and the
    # count survives them exactly.
    assert q.dequeue(admin, QUEUE, batch=1000) == []
    time.sleep(0.01)
    admin.execute("SELECT lonnymq_prune_channels_v1(1, 1000)")
    assert admin.execute("SELECT count(*) FROM lonnymq_channel WHERE queue = %s", [QUEUE]).fetchone() == (0,)
    assert admin.execute("SELECT count(*) FROM lonnymq_wake").fetchone() == (0,)
    assert _released_total(admin) == len(ledger.delivered), summary
    print(summary, json.dumps(dict(ledger.retried)))
