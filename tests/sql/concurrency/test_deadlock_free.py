"""Deadlock freedom: producers enqueueing across many channels in random order, concurrently
with dequeuers and acks, never deadlock (SQLSTATE 40P01) and never need a retry.

No call is retried here: any error of any party fails the test. Lengths come from
``LONNYMQ_DEADLOCK_SECONDS`` (default 20).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.sql.concurrency import sqlcalls as q

# Soaks of LONNYMQ_DEADLOCK_SECONDS each: make test runs them, make test-fast leaves them out.
# django_independent: SQL through psycopg only; Django only makes the test database (CONTRIBUTING.md)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.django_independent]

QUEUE = "dl"
CHANNELS = [f"tenant-{i:02d}" for i in range(50)]


def _seconds() -> float:
    return float(os.environ.get("LONNYMQ_DEADLOCK_SECONDS", "20"))


class Run:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.errors: Counter[str] = Counter()
        self.samples: list[str] = []
        self.roles: dict[int, str] = {}
        self.enqueued = 0
        self.transactions = 0
        self.delivered = 0

    def error(self, who: str, exc: BaseException) -> None:
        text = q.name_pids(str(exc), self.roles)
        with self.lock:
            self.errors[q.sqlstate(exc) or type(exc).__name__] += 1
            if len(self.samples) < 5:
                self.samples.append(f"{who}: {text}")


def _setup(admin: psycopg.Connection[Any]) -> None:
    # Every channel exists up front with a mix of limits (acks then update channel rows too).
    for i, name in enumerate(CHANNELS):
        q.configure(admin, QUEUE, name, max_concurrency=[None, 2, 5][i % 3])


def _dequeuer(conn: psycopg.Connection[Any], rng: random.Random, stop: threading.Event, run: Run, me: int) -> None:
    run.roles[conn.info.backend_pid] = f"dequeuer {me}"
    while not stop.is_set():
        try:
            got = q.dequeue(conn, QUEUE, rng.randint(1, 50), 600_000, worker=f"d{me}")
            if got:
                q.ack(conn, got)
                with run.lock:
                    run.delivered += len(got)
            else:
                time.sleep(0.005)
        except psycopg.Error as exc:
            run.error(f"dequeuer {me}", exc)


def _run(connect: Callable[..., psycopg.Connection[Any]],
         transaction: Callable[[psycopg.Connection[Any], random.Random], int], producers: int = 6) -> Run:
    admin = connect()
    _setup(admin)
    run = Run()
    stop = threading.Event()
    seed = random.randrange(1 << 30)
    print(f"deadlock test seed {seed}")

    def produce(conn: psycopg.Connection[Any], rng: random.Random, me: int) -> None:
        run.roles[conn.info.backend_pid] = f"producer {me}"
        while not stop.is_set():
            try:
                n = transaction(conn, rng)
                conn.commit()
                with run.lock:
                    run.enqueued += n
                    run.transactions += 1
            except psycopg.Error as exc:
                conn.rollback()
                run.error(f"producer {me}", exc)

    threads = [
        threading.Thread(target=produce, args=(connect(autocommit=False), random.Random(seed + i), i))
        for i in range(producers)
    ] + [
        threading.Thread(target=_dequeuer, args=(connect(), random.Random(seed + 50 + i), stop, run, i))
        for i in range(3)
    ]
    for thread in threads:
        thread.start()
    try:
        time.sleep(_seconds())
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    print(
        f"deadlock test: {run.transactions} producer transactions, {run.enqueued} messages enqueued, "
        f"{run.delivered} delivered, errors {dict(run.errors)}"
    )
    assert not any(t.is_alive() for t in threads), "a thread is stuck (waiting on a lock?)"
    assert q.check(admin, 1000) == []
    return run


def test_batches_across_fifty_channels_in_random_order_never_deadlock(
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    """6 producers, one enqueue_many per transaction, 5-60 messages spread over random
    channels in random order (some new channels, some scheduled), plus 3 dequeuers."""

    def transaction(conn: psycopg.Connection[Any], rng: random.Random) -> int:
        n = rng.randint(5, 60)
        channels = [rng.choice(CHANNELS) for _ in range(n)]
        if rng.random() < 0.05:  # now and then a brand-new channel, created concurrently
            channels[rng.randrange(n)] = f"new-{rng.randrange(200)}"
        delays = [rng.randint(10, 200) if rng.random() < 0.1 else None for _ in range(n)]
        q.enqueue_many(conn, QUEUE, channels, [{"i": i} for i in range(n)], delays_ms=delays)
        time.sleep(rng.uniform(0, 0.01))  # the rest of the request, transaction still open
        return n

    run = _run(connect, transaction)
    assert run.transactions > 100, "too little traffic to prove anything"
    assert not run.errors, "\n".join(run.samples)


def test_batches_claiming_overlapping_dedup_keys_in_random_order_never_deadlock(
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    """The Spark export's case: concurrent chunks whose dedup keys overlap (a retried task,
    two partitions holding the same rows), each in its own random row order. The keys are
    claimed in one global order inside the call, so one chunk waits for the other's commit
    and takes the existing id; neither deadlocks."""

    def transaction(conn: psycopg.Connection[Any], rng: random.Random) -> int:
        n = rng.randint(5, 60)
        rows = rng.sample(range(400), n)  # row r always goes to the same channel with the same key
        q.enqueue_many(
            conn,
            QUEUE,
            [CHANNELS[r % len(CHANNELS)] for r in rows],
            [{"row": r} for r in rows],
            dedup_keys=[f"row-{r}-{rng.randrange(30)}" for r in rows],
        )
        time.sleep(rng.uniform(0, 0.01))
        return n

    run = _run(connect, transaction)
    assert run.transactions > 100, "too little traffic to prove anything"
    assert not run.errors, "\n".join(run.samples)


def test_several_enqueues_per_transaction_in_random_channel_order_never_deadlock(
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    """A web request that enqueues for several tenants, one call at a time, in whatever
    order its code runs: 2-4 calls (enqueue or enqueue_many) per transaction into random
    channels. Two such requests touching two idle channels in opposite orders must not
    deadlock either."""

    def transaction(conn: psycopg.Connection[Any], rng: random.Random) -> int:
        n = 0
        for _ in range(rng.randint(2, 4)):
            if rng.random() < 0.5:
                q.enqueue(conn, QUEUE, rng.choice(CHANNELS), {"one": True})
                n += 1
            else:
                k = rng.randint(2, 8)
                q.enqueue_many(conn, QUEUE, [rng.choice(CHANNELS) for _ in range(k)], [{}] * k)
                n += k
            time.sleep(rng.uniform(0, 0.005))
        return n

    run = _run(connect, transaction)
    assert run.transactions > 100, "too little traffic to prove anything"
    assert not run.errors, "\n".join(run.samples)
