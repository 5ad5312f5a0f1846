"""The workers' own VACUUM of the channel table (LONNYMQ_VACUUM_THRESHOLD): every release
rewrites its channel's row and none of those updates is HOT, so a drain over many channels
leaves about one dead row version per message; a worker vacuums the table once they pile up,
and only then (docs/performance.md, "A busy channel after many")."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connection
from django.test import override_settings

from django_lonnymq import Item, enqueue_many, handler, testing
from django_lonnymq.registry import unregister
from django_lonnymq.worker import Worker
from django_lonnymq.worker.connection import ControlConnection
from django_lonnymq.worker.housekeeping import Vacuum
from django_lonnymq.worker.stats import Stats

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "t_vacuum"
CHANNELS = 300
TABLES = ("lonnymq_channel", "lonnymq_wake", "lonnymq_message")


@pytest.fixture
def vacuum_queue():
    handler(QUEUE)(lambda message: None)
    yield QUEUE
    unregister(QUEUE)


def dead_row_versions(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_get_dead_tuples(%s::regclass)", [table])
        return int(cursor.fetchone()[0])


def channel_table() -> tuple[int, int]:
    """(dead row versions, VACUUMs so far) of the channel table, from the statistics."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_stat_get_dead_tuples('lonnymq_channel'::regclass),"
            " pg_stat_get_vacuum_count('lonnymq_channel'::regclass)"
        )
        dead, vacuums = cursor.fetchone()
    return int(dead), int(vacuums)


def drain_reported(keep: tuple[int, ...] = ()) -> bool:
    """Whether every connection of the drain is gone (a backend reports what it has not yet
    reported of its statistics as it exits)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND pid <> ALL (%s)",
            [list(keep)],
        )
        return cursor.fetchone()[0] == 0


def churn(queue: str, keep: tuple[int, ...] = ()) -> int:
    """One message into each of CHANNELS channels, drained without housekeeping: each
    release rewrites a channel row, and each wake-up mark the enqueue left is deleted.
    Waits until the statistics show the dead versions of both tables: the drain's
    connections report them as they exit, not all at once, and a worker that looked while
    the channel table's counts were in and the wake-up marks' not yet would find one table
    to vacuum, not two. ``keep``: the test's own other connections. Returns the channel table's dead versions."""
    enqueue_many(queue, [Item({"i": i}, channel=f"c{i}") for i in range(CHANNELS)])
    assert testing.drain(queue).acked == CHANNELS
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (
        drain_reported(keep) and all(dead_row_versions(table) >= CHANNELS for table in TABLES)
    ):
        time.sleep(0.05)
    assert drain_reported(keep)
    for table in TABLES:
        assert dead_row_versions(table) >= CHANNELS, table
    return dead_row_versions("lonnymq_channel")


def run_burst(queue: str) -> Worker:
    worker = Worker([queue], burst=True)
    worker.run()
    return worker


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
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


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
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


@pytest.fixture
def control():
    conn = ControlConnection("default", "t-vacuum", Stats(), threading.Event())
    assert conn.ensure()
    yield conn
    conn.close()


def test_a_held_horizon_stops_the_repeated_vacuums_and_its_release_vacuums_at_once(vacuum_queue, control):
    """While another session holds a snapshot, a VACUUM removes nothing and the table stays
    due: the worker vacuums it once, then waits while the horizon stays where it is, instead of
    reading every dead version again each second. Once the snapshot ends, the next look
    vacuums the tables, the message table too, and they are no longer due."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    holder = psycopg.connect(**params, autocommit=True)
    try:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1")
        dead = churn(vacuum_queue, keep=(holder.info.backend_pid, control.conn.info.backend_pid))
        vacuum = Vacuum(control)
        with override_settings(LONNYMQ_VACUUM_THRESHOLD=100):
            vacuum.tick(1000.0)
            assert vacuum.vacuums == 2  # the channel table and the wake-up marks: nothing removed
            assert vacuum.held
            # Nothing removed: every committed visit left an old version the snapshot keeps. The
            # statistics' count (dead) can be higher: it also counts row versions of aborted
            # transactions (a dequeue whose step 1 timed out rolls back its block), which VACUUM
            # removes whatever the horizon.
            assert CHANNELS <= dead_row_versions("lonnymq_channel") <= dead
            for second in range(1, 4):  # within the back-off, the horizon unchanged: no VACUUM
                vacuum.tick(1000.0 + second * 0.5)
            assert vacuum.vacuums == 2
            assert vacuum.skipped >= 1
        holder.execute("ROLLBACK")
        with override_settings(LONNYMQ_VACUUM_THRESHOLD=100):
            vacuum.tick(1000.0 + Vacuum.HELD_LONG + 1)
        # Every due table, the messages' included (the drain deleted 300 of them).
        assert vacuum.vacuums >= 4
        assert not vacuum.held
        assert dead_row_versions("lonnymq_channel") < 100
        assert dead_row_versions("lonnymq_message") < 100
    finally:
        holder.close()


def test_the_messages_one_busy_channel_left_under_a_held_horizon_are_vacuumed_once_it_moves(
    vacuum_queue, control
):
    """One busy channel leaves few dead channel versions (a visit takes a batch) and a dead
    message per message: the channel table is never due, and the worker leaves the messages
    to autovacuum while the horizon stands; once a horizon that stood HELD_LONG moves on, it
    vacuums them (autovacuum may be off)."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    holder = psycopg.connect(**params, autocommit=True)
    try:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1")
        enqueue_many(vacuum_queue, [Item({"i": i}, channel="one") for i in range(CHANNELS)])
        assert testing.drain(vacuum_queue, concurrency=100, batch_size=100).acked == CHANNELS
        keep = (holder.info.backend_pid, control.conn.info.backend_pid)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (
            drain_reported(keep) and dead_row_versions("lonnymq_message") >= CHANNELS
        ):
            time.sleep(0.05)
        assert dead_row_versions("lonnymq_message") >= CHANNELS
        assert dead_row_versions("lonnymq_channel") < 100
        vacuum = Vacuum(control)
        with override_settings(LONNYMQ_VACUUM_THRESHOLD=100):
            vacuum.tick(1000.0)
            vacuum.tick(1000.0 + Vacuum.HELD_LONG + 1)  # the horizon still stands
            assert vacuum.vacuums == 0
            holder.execute("ROLLBACK")
            vacuum.tick(1000.0 + Vacuum.HELD_LONG + 2)
        assert vacuum.vacuums == 1
        assert dead_row_versions("lonnymq_message") < 100
    finally:
        holder.close()
