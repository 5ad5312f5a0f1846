"""The workers' own VACUUM of the channel table (LONNYMQ_VACUUM_THRESHOLD): every release
rewrites its channel's row and none of those updates is HOT, so a drain over many channels
leaves about one dead row version per message; a worker vacuums the table once they pile up,
and only then (docs/performance.md, "A busy channel after many")."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.test import override_settings

from django_lonnymq import Item, enqueue_many, handler, testing
from django_lonnymq.registry import unregister
from django_lonnymq.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "t_vacuum"
CHANNELS = 300


@pytest.fixture
def vacuum_queue():
    handler(QUEUE)(lambda message: None)
    yield QUEUE
    unregister(QUEUE)


def channel_table() -> tuple[int, int]:
    """(dead row versions, VACUUMs so far) of the channel table, from the statistics."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_stat_get_dead_tuples('lonnymq_channel'::regclass),"
            " pg_stat_get_vacuum_count('lonnymq_channel'::regclass)"
        )
        dead, vacuums = cursor.fetchone()
    return int(dead), int(vacuums)


def churn(queue: str) -> int:
    """One message into each of CHANNELS channels, drained without housekeeping: each
    release rewrites a channel row. Waits until the statistics show the dead versions (the
    draining connection reports them as it closes); returns how many."""
    enqueue_many(queue, [Item({"i": i}, channel=f"c{i}") for i in range(CHANNELS)])
    assert testing.drain(queue).acked == CHANNELS
    deadline = time.monotonic() + 20
    while (dead := channel_table()[0]) < CHANNELS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dead >= CHANNELS
    return dead


def run_burst(queue: str) -> Worker:
    worker = Worker([queue], burst=True)
    worker.run()
    return worker


def test_a_worker_vacuums_the_channel_table_once_dead_row_versions_pass_the_threshold(vacuum_queue):
    churn(vacuum_queue)
    _, before = channel_table()
    with override_settings(LONNYMQ_VACUUM_THRESHOLD=100):
        worker = run_burst(vacuum_queue)
    dead, after = channel_table()
    # The channel table, and the wake-up marks the enqueue left and the drain deleted.
    assert worker.housekeeping.vacuum.vacuums == 2
    assert after == before + 1
    assert dead < 100


@pytest.mark.parametrize("threshold", [None, 1_000_000])
def test_no_vacuum_below_the_threshold_or_when_turned_off(vacuum_queue, threshold):
    dead = churn(vacuum_queue)
    _, before = channel_table()
    with override_settings(LONNYMQ_VACUUM_THRESHOLD=threshold):
        worker = run_burst(vacuum_queue)
    assert worker.housekeeping.vacuum.vacuums == 0
    after_dead, after = channel_table()
    assert after == before
    assert after_dead >= dead
