"""Dedup modes under concurrency: real connections, each in its own transaction, enqueueing
one key at the same moment. However they interleave, a key never has two waiting messages,
a running message is never changed, and the last committed payload is the one kept.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from tests.harness.helpers import assert_healthy, dequeue, enqueue_sql, named, rows

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 8
ROUNDS = 5


def run_together(dsn: str, work, threads: int = THREADS) -> list:
    """work(conn, index) on ``threads`` connections started at one moment, each committing its
    own transaction; a serialization failure or deadlock would show up as an exception."""
    barrier = threading.Barrier(threads, timeout=10)
    results: list = [None] * threads

    def body(index: int) -> None:
        with psycopg.connect(dsn, autocommit=False) as conn:
            try:
                barrier.wait()
                results[index] = work(conn, index)
                conn.commit()
            except Exception as exc:  # reported by the test
                conn.rollback()
                results[index] = exc

    started = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in started), "a producer hung (deadlock?)"
    errors = [r for r in results if isinstance(r, Exception)]
    assert errors == [], f"concurrent enqueues failed: {errors}"
    return results


def waiting_of(key: str) -> list[dict]:
    return rows(
        "SELECT id, payload FROM lonnymq_message WHERE dedup_key = %s AND lease_until IS NULL ORDER BY id",
        [key],
    )


@pytest.mark.parametrize("mode", ["replace", "update"])
def test_concurrent_enqueues_of_one_key_never_make_two_waiting_messages(dsn, mode):
    for round_ in range(ROUNDS):
        results = run_together(
            dsn,
            lambda conn, i, key=f"k{round_}": enqueue_sql(
                "race", f'{{"i": {i}}}', dedup_key=key, on_duplicate=mode, delay_ms=60_000, conn=conn
            ),
        )
        assert len(set(results)) == 1, f"one key gave several ids: {results}"
        [message] = waiting_of(f"k{round_}")
        assert message["id"] == results[0]
    assert rows("SELECT count(*) AS n FROM lonnymq_message") == [{"n": ROUNDS}]
    assert_healthy()


def test_concurrent_enqueues_on_a_running_key_make_exactly_one_new_waiting_message(dsn, connect):
    conn = connect()
    first = enqueue_sql("race", '"running"', dedup_key="k", conn=conn)
    [leased] = dequeue("race", conn=conn)
    assert leased["id"] == first
    for _ in range(ROUNDS):
        results = run_together(
            dsn,
            lambda c, i: enqueue_sql("race", f'{{"i": {i}}}', dedup_key="k", on_duplicate="replace", conn=c),
        )
        assert len(set(results)) == 1 and first not in results
        [message] = waiting_of("k")
        assert message["id"] == results[0]
    # The running message was never touched: same payload, same lease.
    [running] = rows("SELECT payload, lease_token FROM lonnymq_message WHERE id = %s", [first])
    assert (running["payload"], running["lease_token"]) == ("running", leased["lease_token"])


def test_concurrent_batches_with_repeated_keys_in_any_order(dsn):
    keys = [f"k{n}" for n in range(6)]

    def work(conn, index):
        order = keys[index % 6 :] + keys[: index % 6]  # each batch takes the keys in another order
        if index % 2:
            order.reverse()
        order = order + order[:2]  # and repeats some within the batch
        return named(
            "enqueue_many",
            conn,
            queue="race",
            channels=["c"] * len(order),
            payloads=[f'{{"p": {index}}}'] * len(order),
            run_at_ms=None,
            delay_ms=[60_000] * len(order),
            priorities=None,
            dedup_keys=order,
            on_duplicate=["replace"] * len(order),
            max_attempts=None,
            default_max_attempts=5,
            priority_step_ms=1000,
            tolerance_ms=50,
            costs=None,
            slots=None,
        )

    run_together(dsn, work)
    per_key = rows("SELECT dedup_key, count(*) AS n FROM lonnymq_message GROUP BY dedup_key ORDER BY 1")
    assert per_key == [{"dedup_key": k, "n": 1} for k in keys]
    assert_healthy()
