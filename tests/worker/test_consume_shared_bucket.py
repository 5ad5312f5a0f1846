"""api.consume() and the workers spend one token bucket: 4 threads consume while 4 worker
processes drain the same channel, and the two together never spend more than the bucket
allows over the run (its burst plus its refill since the start)."""

from __future__ import annotations

import threading
import time

from django.db import connection

from django_lonnymq import Item, api, enqueue_many

from .conftest import describe

RATE_COUNT, PERIOD_MS, BURST = 40, 1000, 10
JOBS = 80


def test_consumers_and_workers_share_the_channel_bucket_exactly(spawn, db):
    api.configure_channel("t_record", "tenant", rate=f"{RATE_COUNT} / s, burst {BURST}")
    db.rows("CREATE TABLE IF NOT EXISTS testapp_consume_log (tokens integer NOT NULL, at_ms bigint NOT NULL)")
    enqueue_many("t_record", [Item({"n": n}, channel="tenant") for n in range(JOBS)])
    start_ms = db.scalar("SELECT lonnymq_now_ms_v1()")
    stop = threading.Event()
    refused: list[float] = []
    errors: list[BaseException] = []

    def consumer(tokens: int) -> None:
        try:
            while not stop.is_set():
                got = api.consume("t_record", "tenant", tokens)
                if got.ok:
                    with connection.cursor() as cursor:
                        cursor.execute(
                            "INSERT INTO testapp_consume_log VALUES (%s, lonnymq_now_ms_v1())", [tokens]
                        )
                else:
                    refused.append(got.retry_after)
                    time.sleep(min(got.retry_after, 0.05))
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=consumer, args=(1 + n % 2,)) for n in range(4)]
    for thread in threads:
        thread.start()
    workers = [
        spawn("--queue", "t_record", "--burst", "--concurrency", "2", label=f"worker {n}") for n in range(4)
    ]
    codes = [w.wait(timeout=120) for w in workers]
    stop.set()
    for thread in threads:
        thread.join(timeout=30)

    assert not errors, errors
    assert codes == [0, 0, 0, 0], describe(*workers)
    assert len(db.events("done", "t_record")) == JOBS, describe(*workers)
    channel = db.channel("t_record", "tenant")
    consumed = db.scalar("SELECT coalesce(sum(tokens), 0) FROM testapp_consume_log")
    # The last spend, of either kind, moved last_dequeue_at (the bucket's clock).
    end_ms = channel["last_dequeue_at"]
    allowed = BURST + RATE_COUNT * (end_ms - start_ms) // PERIOD_MS
    spent = channel["released_total"] + consumed
    assert spent <= allowed, f"spent {spent} tokens, the bucket allows {allowed} over {end_ms - start_ms} ms"
    # The test could have failed: both sides spent, callers were refused, and together they
    # kept the bucket near empty (so an over-spend would have shown).
    assert consumed > 0 and refused, (consumed, len(refused))
    assert all(r > 0 for r in refused)
    assert spent >= allowed * 0.7, f"spent {spent} of {allowed}: the bucket was not the limit"
    assert len({d["pid"] for d in db.events("done", "t_record")}) >= 2, "only one process did work"
