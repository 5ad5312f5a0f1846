"""The worker rows' SQL (lonnymq_worker_beat_v1 / _stop_v1): names unique among live workers,
taken over from stopped and lost ones, old rows pruned, bad input refused."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from django.db import connection, transaction

from django_lonnymq import sql
from django_lonnymq.exceptions import InvalidArgument, sql_errors
from django_lonnymq.models import Worker as WorkerRow
from django_lonnymq.registry import autodiscover
from django_lonnymq.worker import Worker

pytestmark = pytest.mark.django_db


def beat(name: str, instance: uuid.UUID, *, lost_ms: int = 30_000, prune_ms: int = 86_400_000, **figures) -> str:
    params = {
        "name": name,
        "instance": str(instance),
        "host": "h",
        "pid": 1,
        "queues": ["q"],
        "concurrency": 1,
        "started_at": datetime.now(UTC),
        "in_flight": 0,
        "processed": 0,
        "failed": 0,
        "lost_after_ms": lost_ms,
        "prune_after_ms": prune_ms,
        **figures,
    }
    with sql_errors(), connection.cursor() as cursor:
        cursor.execute(sql.query("worker_beat"), params)
        return cursor.fetchone()[0]


def stop(name: str, instance: uuid.UUID) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            sql.query("worker_stop"),
            {"name": name, "instance": str(instance), "in_flight": 0, "processed": 1, "failed": 0},
        )
        return cursor.fetchone()[0]


def silence(name: str, seconds: int) -> None:
    """As if the worker had not beaten for ``seconds`` (moves its last heartbeat back)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE lonnymq_worker SET heartbeat_at = heartbeat_at - make_interval(secs => %s)"
            " WHERE name = %s",
            [seconds, name],
        )


def test_a_name_held_by_a_live_worker_gets_a_suffix():
    first, second, third = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    assert beat("billing", first) == "billing"
    assert beat("billing", second) == "billing#2"
    assert beat("billing", third) == "billing#3"
    # Each keeps its own name at its next beat, with its figures.
    assert beat("billing", first, in_flight=3) == "billing"
    assert beat("billing#2", second, processed=7) == "billing#2"
    rows = {w.name: w for w in WorkerRow.objects.all()}
    assert rows["billing"].instance == first and rows["billing"].in_flight == 3
    assert rows["billing#2"].instance == second and rows["billing#2"].processed == 7


def test_a_stopped_or_lost_holder_gives_its_name_to_the_next_worker():
    gone, lost, fresh = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    beat("a", gone)
    assert stop("a", gone) is True
    assert beat("a", fresh) == "a"
    row = WorkerRow.objects.get(name="a")
    assert row.instance == fresh and row.stopped_at is None
    beat("b", lost)
    silence("b", 60)
    assert beat("b", fresh, lost_ms=30_000) == "b"
    # A worker whose name was taken over while it was silent stops only the row it holds.
    assert stop("b", lost) is False


def test_rows_silent_or_stopped_longer_than_prune_after_are_deleted_by_any_beat():
    old, stopped, live = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    beat("old", old)
    beat("stopped", stopped)
    stop("stopped", stopped)
    beat("recent", uuid.uuid4())
    silence("old", 120)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE lonnymq_worker SET stopped_at = stopped_at - interval '2 minutes' WHERE name = 'stopped'")
    beat("live", live, prune_ms=60_000)
    assert set(WorkerRow.objects.values_list("name", flat=True)) == {"recent", "live"}


@pytest.mark.parametrize(
    ("field", "override"),
    [
        ("name", {"name": ""}),
        ("name", {"name": "   "}),
        ("name", {"name": "x" * 201}),
        ("in_flight", {"in_flight": -1}),
        ("lost_after", {"lost_ms": 0}),
        ("prune_after", {"prune_ms": 40_000_000_000}),
        ("concurrency", {"concurrency": 0}),
    ],
)
def test_bad_beats_are_refused_and_write_nothing(field, override):
    name = override.pop("name", "w")
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        beat(name, uuid.uuid4(), **override)
    assert caught.value.field == field
    assert not WorkerRow.objects.exists()


@pytest.mark.parametrize("name", ["", "  ", "x" * 201, "a\x00b"])
def test_a_bad_worker_name_is_refused_before_the_worker_starts(name):
    autodiscover()
    with pytest.raises(InvalidArgument) as caught:
        Worker(["t_record"], name=name)
    assert caught.value.field == "name"


def test_listing_tells_live_lost_and_stopped_apart_and_counts_held_leases():
    from django_lonnymq import enqueue, workers

    live, lost, gone = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    beat("w-live", live)
    beat("w-lost", lost)
    beat("w-gone", gone)
    stop("w-gone", gone)
    silence("w-lost", 120)
    for n in range(3):
        enqueue("t_list", {"n": n})
    with connection.cursor() as cursor:
        cursor.execute(
            sql.query("dequeue"),
            {"queue": "t_list", "batch_size": 2, "lease_ms": 30_000, "worker": "w-live", "tolerance_ms": 50},
        )
        assert len(cursor.fetchall()) == 2
    rows = {w.name: (w.lq_state, w.lq_leases) for w in workers.listing()}
    assert rows == {"w-live": ("live", 2), "w-lost": ("lost", 0), "w-gone": ("stopped", 0)}
    assert [w.name for w in workers.listing("lost")] == ["w-lost"]
    assert not workers.listing("live").filter(name="w-gone").exists()
    with pytest.raises(InvalidArgument) as caught:
        workers.listing("dead")
    assert caught.value.field == "state"
