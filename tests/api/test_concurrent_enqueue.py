"""First enqueues into a new channel from many connections at once agree on one channel."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from tests.harness.helpers import assert_healthy, dequeue, enqueue_sql, named, rows

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 8


def run_together(dsn: str, work) -> list:
    """Run work(conn, index) on THREADS connections, each in its own open transaction,
    started at the same moment; commit them one by one. Returns results or exceptions."""
    barrier = threading.Barrier(THREADS, timeout=10)
    results: list = [None] * THREADS

    def body(index: int) -> None:
        with psycopg.connect(dsn, autocommit=False) as conn:
            try:
                barrier.wait()
                results[index] = work(conn, index)
                time.sleep(0.05)  # keep the transaction open while the others run into it
                conn.commit()
            except Exception as exc:  # reported by the test
                conn.rollback()
                results[index] = exc

    threads = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a producer hung (deadlock?)"
    return results


def test_concurrent_first_enqueues_create_exactly_one_channel(dsn):
    results = run_together(
        dsn, lambda conn, i: enqueue_sql("race", f'{{"i": {i}}}', channel="brand-new", conn=conn)
    )
    errors = [r for r in results if isinstance(r, Exception)]
    assert errors == [], f"concurrent first enqueues failed: {errors}"
    channels = rows("SELECT id FROM lonnymq_channel WHERE queue = 'race'")
    assert len(channels) == 1, f"expected one channel row, got {channels}"
    messages = rows("SELECT id, channel_id FROM lonnymq_message ORDER BY id")
    assert sorted(m["id"] for m in messages) == sorted(results)
    assert {m["channel_id"] for m in messages} == {channels[0]["id"]}
    got = []
    while batch := dequeue("race", batch=3):
        got += batch
    assert sorted(r["id"] for r in got) == sorted(results)
    assert_healthy()


def test_concurrent_enqueue_many_over_overlapping_new_channels_in_any_order(dsn):
    names = [f"ch-{n}" for n in range(6)]

    def work(conn, index):
        order = names[index % 6 :] + names[: index % 6]  # each producer touches the channels in another order
        if index % 2:
            order.reverse()
        return named(
            "enqueue_many",
            conn,
            queue="race",
            channels=order,
            payloads=[f'{{"p": {index}}}'] * len(order),
            run_at_ms=None,
            delay_ms=None,
            priorities=None,
            dedup_keys=None,
            on_duplicate=None,
            max_attempts=None,
            default_max_attempts=5,
            priority_step_ms=1000,
            tolerance_ms=50,
            costs=None,
            slots=None,
        )

    results = run_together(dsn, work)
    errors = [r for r in results if isinstance(r, Exception)]
    assert errors == [], f"concurrent enqueue_many failed: {errors}"
    channels = rows("SELECT name, id FROM lonnymq_channel WHERE queue = 'race' ORDER BY name")
    assert [c["name"] for c in channels] == names
    per_channel = rows("SELECT channel_id, count(*) AS n FROM lonnymq_message GROUP BY channel_id")
    assert {r["channel_id"]: r["n"] for r in per_channel} == {c["id"]: THREADS for c in channels}
    assert_healthy()


def test_concurrent_enqueues_with_one_dedup_key_store_one_message(dsn):
    results = run_together(
        dsn, lambda conn, i: enqueue_sql("race", f'{{"i": {i}}}', channel="c", dedup_key="same", conn=conn)
    )
    errors = [r for r in results if isinstance(r, Exception)]
    assert errors == [], f"concurrent dedup enqueues failed: {errors}"
    assert len(set(results)) == 1, f"one key gave several ids: {results}"
    assert rows("SELECT count(*) AS n FROM lonnymq_message") == [{"n": 1}]
