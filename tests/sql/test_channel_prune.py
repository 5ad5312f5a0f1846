"""Pruning idle channels (lonnymq_prune_channels_v1, LONNYMQ_CHANNEL_IDLE_PRUNE): what goes,
what stays, in batches, and what walks channels meanwhile."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from django.test import override_settings

from django_lonnymq import Item, api, enqueue, enqueue_many
from django_lonnymq.exceptions import ChannelGone, InvalidArgument
from django_lonnymq.worker.housekeeping import Pruner, idle_prune_ms
from django_lonnymq.worker.observer import Observer, Observers
from django_lonnymq.worker.stats import Stats
from tests.harness import helpers

pytestmark = pytest.mark.django_db

QUEUE = "prune"


def prune(idle_ms: int = 60_000, limit: int = 1000) -> int:
    return int(helpers.named("prune_channels", idle_ms=idle_ms, limit=limit))


def age(name: str, *, queue: str = QUEUE, hours: int = 2) -> None:
    """Make a channel look created (and last released from) ``hours`` ago."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE lonnymq_channel SET created_at = now() - make_interval(hours => %s),"
            " last_dequeue_at = CASE WHEN last_dequeue_at IS NULL THEN NULL"
            " ELSE lonnymq_now_ms_v1() - %s::bigint * 3600000 END"
            " WHERE queue = %s AND name = %s",
            [hours, hours, queue, name],
        )


def names(queue: str = QUEUE) -> list[str]:
    return [
        r["name"]
        for r in helpers.rows("SELECT name FROM lonnymq_channel WHERE queue = %s ORDER BY name", [queue])
    ]


def emptied(name: str) -> None:
    """A channel that held a message, released and acked it: empty, default limits."""
    enqueue(QUEUE, {"n": name}, channel=name)
    leased = helpers.dequeue(QUEUE, 10)
    assert helpers.ack(leased)
    age(name)


def test_an_idle_empty_channel_goes_and_a_recent_one_stays() -> None:
    emptied("old")
    enqueue(QUEUE, {"n": 1}, channel="recent")
    helpers.ack(helpers.dequeue(QUEUE, 10))  # released just now: not idle
    assert prune() == 1
    assert names() == ["recent"]
    assert prune(idle_ms=1) == 1  # idle for longer than 1 ms by now
    assert names() == []


@pytest.mark.parametrize(
    "limits",
    [
        {"max_concurrency": 2},
        {"release_interval": timedelta(seconds=1)},
        {"weight": 3},
        {"rate": "5/s"},
        {"paused": True},
    ],
    ids=lambda limits: next(iter(limits)),
)
def test_a_configured_channel_is_kept(limits: dict[str, Any]) -> None:
    api.configure_channel(QUEUE, "configured", **limits)
    age("configured")
    emptied("plain")
    assert prune() == 1
    assert names() == ["configured"]


def test_a_channel_that_follows_a_plan_is_kept_even_with_the_default_limits() -> None:
    """A plan is something a user configured: pruning would lose it, and the channel would come
    back on the queue's default plan, not the one it was given."""
    api.configure_plan("prune-default-limits")  # a plan with the default limits
    api.configure_channel(QUEUE, "planned", plan="prune-default-limits")
    age("planned")
    emptied("plain")
    assert prune() == 1
    assert names() == ["planned"]
    api.configure_channel(QUEUE, "planned", plan=None)  # follows no plan again: it may go
    assert prune() == 1
    assert names() == []


def test_a_channel_back_to_default_limits_may_go() -> None:
    api.configure_channel(QUEUE, "was-capped", max_concurrency=2)
    api.configure_channel(QUEUE, "was-capped", max_concurrency=None)
    age("was-capped")
    assert prune() == 1


def test_a_channel_with_messages_in_any_state_or_a_dedup_key_is_kept() -> None:
    enqueue(QUEUE, {"n": 1}, channel="ready")
    enqueue(QUEUE, {"n": 2}, channel="scheduled", delay=timedelta(hours=1))
    enqueue(QUEUE, {"n": 3}, channel="leased")
    enqueue(QUEUE, {"n": 4}, channel="deduped", dedup_key="k")
    for name in ("ready", "scheduled", "leased", "deduped"):
        age(name)
    # Lease the message of "leased" only (the others stay ready or scheduled).
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE lonnymq_message m SET lease_until = lonnymq_now_ms_v1() + 60000, lease_token = gen_random_uuid()"
            " FROM lonnymq_channel c WHERE c.id = m.channel_id AND c.name IN ('leased', 'deduped')"
        )
        # The dedup key outlives its message: ack (delete) the deduped message, keep the key.
        cursor.execute(
            "DELETE FROM lonnymq_message m USING lonnymq_channel c WHERE c.id = m.channel_id AND c.name = 'deduped'"
        )
    assert prune() == 0
    assert names() == ["deduped", "leased", "ready", "scheduled"]
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM lonnymq_dedup")
    assert prune() == 1
    assert names() == ["leased", "ready", "scheduled"]


def test_batches_are_bounded() -> None:
    for i in range(5):
        emptied(f"c{i}")
    assert [prune(limit=2), prune(limit=2), prune(limit=2), prune(limit=2)] == [2, 2, 1, 0]


def stats() -> dict[str, tuple[int, int]]:
    return {
        r["queue"]: (r["released_total"], r["channels"])
        for r in helpers.rows("SELECT * FROM lonnymq_queue_stats_v2(%s::text[])", [[QUEUE]])
    }


def test_the_queues_released_total_does_not_fall_and_its_row_stays() -> None:
    emptied("a")
    emptied("b")
    enqueue(QUEUE, {"n": 1}, channel="b")
    assert stats() == {QUEUE: (2, 2)}
    assert prune() == 1  # "a" goes, "b" holds a message
    assert stats() == {QUEUE: (2, 1)}
    helpers.ack(helpers.dequeue(QUEUE, 10))
    age("b")
    assert prune() == 1
    # Every channel gone: the queue keeps its row and its count.
    assert stats() == {QUEUE: (3, 0)}


def test_a_wake_up_mark_goes_with_its_channel_and_the_next_enqueue_recreates_it() -> None:
    emptied("c")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO lonnymq_wake (queue, channel_id, dequeue_at)"
            " SELECT queue, id, 0 FROM lonnymq_channel WHERE name = 'c'"
        )
    assert prune() == 1
    assert helpers.scalar("SELECT count(*) FROM lonnymq_wake") == 0
    message_id = enqueue(QUEUE, {"n": 2}, channel="c")
    assert [m["id"] for m in helpers.dequeue(QUEUE, 10)] == [message_id]


def test_channel_counts_of_a_pruned_channel_are_zero() -> None:
    emptied("c")
    channel_id = helpers.channel_row(QUEUE, "c")["id"]
    assert prune() == 1
    rows = helpers.rows("SELECT * FROM lonnymq_channel_counts_v1(%s::bigint[], 10)", [[channel_id]])
    assert [(r["ready"], r["scheduled"], r["in_flight"]) for r in rows] == [(0, 0, 0)]


@pytest.mark.parametrize(
    ("idle_ms", "limit"), [(0, 10), (None, 10), (31622400001, 10), (1000, 0), (1000, 10001)]
)
def test_bad_arguments_are_refused(idle_ms: int | None, limit: int) -> None:
    with pytest.raises(InvalidArgument):
        prune(idle_ms=idle_ms, limit=limit)  # type: ignore[arg-type]


class Seen(Observer):
    def __init__(self) -> None:
        self.pruned: list[int] = []

    def channels_pruned(self, count: int) -> None:
        self.pruned.append(count)


class Direct:
    """The worker connection's ``quietly`` and ``run``, on the test's own connection (its
    transaction)."""

    def quietly(self, what: str, call: Any) -> list[Any]:
        return call()

    def run(self, name: str, params: Any = None) -> list[Any]:
        return [(helpers.named(name, **(params or {})),)]


@pytest.mark.parametrize(
    ("setting", "expected"),
    [(timedelta(hours=1), 3), (3600, 3), (None, 0), (timedelta(days=400), 0), ("1h", 0)],
)
def test_the_pruner_follows_the_setting_counts_and_tells_its_observers(setting: Any, expected: int) -> None:
    for i in range(3):
        emptied(f"c{i}")
    stats, seen, observers = Stats(), Seen(), Observers()
    observers.add(seen)
    with override_settings(LONNYMQ_CHANNEL_IDLE_PRUNE=setting):
        pruner = Pruner(Direct(), stats, observers)  # type: ignore[arg-type]
        pruner.tick(1000.0)
        assert stats.pruned == expected
        assert seen.pruned == ([expected] if expected else [])
        assert names() == ([] if expected else ["c0", "c1", "c2"])
        if expected:
            assert pruner.next_at == 1000.0 + 60.0  # a tenth of an hour, at most a minute
            assert idle_prune_ms() == 3_600_000


def test_a_full_batch_prunes_again_at_the_next_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Pruner, "BATCH", 2)
    for i in range(3):
        emptied(f"c{i}")
    stats = Stats()
    with override_settings(LONNYMQ_CHANNEL_IDLE_PRUNE=timedelta(hours=1)):
        pruner = Pruner(Direct(), stats, Observers())  # type: ignore[arg-type]
        pruner.tick(10.0)
        assert (stats.pruned, pruner.next_at) == (2, 10.0)
        pruner.tick(10.0)
        assert (stats.pruned, pruner.next_at) == (3, 70.0)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("many", [False, True], ids=["enqueue", "enqueue_many"])
def test_an_enqueue_whose_channel_vanished_after_its_lookup_raises_channel_gone(
    connect: Any, many: bool
) -> None:
    # Case 6 of docs/locking.md "Pruning a channel", for real: a prune (another connection)
    # won the channel's exclusive advisory lock; the enqueue looked the channel up and waits
    # for its shared lock; the prune deletes the row and commits. The enqueue must fail with
    # nothing written (there is no foreign key to refuse its insert since 0036).
    enqueue(QUEUE, {"n": 1}, channel="c")
    helpers.ack(helpers.dequeue(QUEUE, 10))
    channel_id = helpers.channel_row(QUEUE, "c")["id"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        producer_pid = cursor.fetchone()[0]
    pruner = connect(autocommit=False)
    pruner.execute(
        "SELECT pg_advisory_xact_lock(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(%s))", [channel_id]
    )
    failures: list[BaseException] = []

    def delete_once_the_producer_waits() -> None:
        try:
            watcher = connect()
            for _ in range(500):
                waiting = watcher.execute(
                    "SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'advisory' AND NOT granted",
                    [producer_pid],
                ).fetchone()
                if waiting and waiting[0]:
                    break
                time.sleep(0.01)
            else:
                raise AssertionError("the enqueue never waited for the channel's lock")
            pruner.execute("DELETE FROM lonnymq_channel WHERE id = %s", [channel_id])
            pruner.commit()
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)
            pruner.rollback()

    deleter = threading.Thread(target=delete_once_the_producer_waits)
    deleter.start()
    try:
        with pytest.raises(ChannelGone, match="retry the transaction"), transaction.atomic():
            if many:
                enqueue_many(QUEUE, [Item({"n": 2}, channel="c"), Item({"n": 3}, channel="d")])
            else:
                enqueue(QUEUE, {"n": 2}, channel="c")
    finally:
        deleter.join(10)
    assert failures == []
    assert helpers.counts()["lonnymq_message"] == 0
    assert helpers.channel_row(QUEUE, "c") is None
    assert api.check(grace=0) == []
    # The retry creates the channel again and wakes it.
    enqueue(QUEUE, {"n": 4}, channel="c")
    assert [m["payload"] for m in helpers.dequeue(QUEUE, 10)] == [{"n": 4}]


def test_check_reports_messages_whose_channel_is_missing() -> None:
    # The schema rule the foreign key enforced, now proven by lonnymq_check_v2: a message
    # written around the functions (raw SQL) into a channel that does not exist.
    enqueue(QUEUE, {"n": 1}, channel="c")
    missing = int(helpers.scalar("SELECT coalesce(max(id), 0) + 1000 FROM lonnymq_channel"))
    with connection.cursor() as cursor:
        for _ in range(2):
            cursor.execute(
                "INSERT INTO lonnymq_message (channel_id, payload, dequeue_at, max_attempts)"
                " VALUES (%s, '{}'::jsonb, 0, 5)",
                [missing],
            )
    helpers.dequeue(QUEUE, 10)  # one of c's, in flight: not an orphan
    problems = [p for p in api.check(grace=0) if p.problem == "orphaned"]
    assert [(p.channel_id, p.queue, p.channel) for p in problems] == [(missing, None, None)]
    assert problems[0].detail == f"2 message(s) of channel {missing}, which does not exist"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
def test_prune_and_delete_channel_refuse_other_isolation_levels(isolation: str) -> None:
    enqueue(QUEUE, {"n": 1}, channel="c")
    channel_id = helpers.channel_row(QUEUE, "c")["id"]
    for statement, params in (
        ("SELECT lonnymq_prune_channels_v1(1, 10)", []),
        ("SELECT lonnymq_delete_channel_v1(%s)", [channel_id]),
    ):
        with (
            pytest.raises(DatabaseError, match="needs READ COMMITTED"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
            cursor.execute(statement, params)


def test_the_worker_metrics_and_log_count_pruned_channels(caplog: pytest.LogCaptureFixture) -> None:
    from django_lonnymq.prometheus.worker import WorkerMetrics
    from django_lonnymq.worker.held import Held
    from django_lonnymq.worker.observer import LogObserver

    metrics = WorkerMetrics(name="w", queues=[QUEUE], concurrency=1, held=Held())
    observers = Observers()
    observers.add(metrics)
    observers.add(LogObserver())
    for i in range(2):
        emptied(f"c{i}")
    with (
        caplog.at_level("INFO", logger="django_lonnymq.worker"),
        override_settings(LONNYMQ_CHANNEL_IDLE_PRUNE=timedelta(hours=1)),
    ):
        Pruner(Direct(), Stats(), observers).tick(0.0)  # type: ignore[arg-type]
    assert metrics.registry.get_sample_value("lonnymq_worker_channels_pruned_total") == 2
    assert "pruned 2 idle empty channel(s)" in caplog.text
