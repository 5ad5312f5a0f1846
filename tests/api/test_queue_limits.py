"""Queue-wide limits: a concurrency cap and a token bucket across all channels and dequeuers."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction

from django_lonnymq import api, enqueue_many
from django_lonnymq.exceptions import InvalidArgument, LeaseLost, translate
from django_lonnymq.models import QueueConfig
from django_lonnymq.rates import Rate
from tests.harness.helpers import (
    ack,
    assert_healthy,
    counts,
    dequeue,
    fail,
    messages_of,
    named,
    reap,
    release,
    rows,
    scalar,
)


def queue_in_flight(queue: str, conn=None) -> int:
    return int(scalar("SELECT in_flight FROM lonnymq_queue_config WHERE queue = %s", [queue], conn))


def leased_count(queue: str, conn=None) -> int:
    return int(
        scalar(
            "SELECT count(*) FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id"
            " WHERE c.queue = %s AND m.lease_until IS NOT NULL",
            [queue],
            conn,
        )
    )


def spread(queue: str, channels: int, per_channel: int) -> None:
    for n in range(channels):
        enqueue_many(queue, list(range(per_channel)), channel=f"c{n}")


@pytest.mark.django_db
def test_a_queue_cap_holds_across_channels_and_acks_give_slots_back():
    assert api.configure_queue("qcap", max_concurrency=3) is True
    spread("qcap", channels=5, per_channel=4)
    first = dequeue("qcap", batch=10)
    # Fairness inside the budget: three different channels, in rotation order.
    assert [r["channel"] for r in first] == ["c0", "c1", "c2"]
    assert queue_in_flight("qcap") == 3
    assert dequeue("qcap", batch=10) == []
    assert ack(first[:1]) == [first[0]["id"]]
    assert queue_in_flight("qcap") == 2
    second = dequeue("qcap", batch=10)
    assert [r["channel"] for r in second] == ["c3"]
    assert queue_in_flight("qcap") == 3
    assert_healthy()


@pytest.mark.django_db
def test_double_ack_and_stale_tokens_change_nothing():
    api.configure_queue("qack", max_concurrency=2)
    spread("qack", channels=2, per_channel=3)
    leased = dequeue("qack", batch=2)
    assert len(leased) == 2
    stale = [{**leased[1], "lease_token": "00000000-0000-0000-0000-000000000000"}]
    assert ack(stale) == []
    assert queue_in_flight("qack") == 2
    assert ack(leased[:1]) == [leased[0]["id"]]
    assert ack(leased[:1]) == []
    assert queue_in_flight("qack") == 1
    with pytest.raises(LeaseLost), transaction.atomic():
        fail(stale[0])
    assert queue_in_flight("qack") == 1
    assert_healthy()


@pytest.mark.django_db
def test_failure_retry_release_dead_and_reaper_give_queue_slots_back():
    api.configure_queue("qback", max_concurrency=4)
    spread("qback", channels=4, per_channel=2)
    leased = dequeue("qback", batch=4)
    assert len(leased) == 4 and queue_in_flight("qback") == 4
    assert fail(leased[0], retry_delay_ms=0) == "retry"
    assert queue_in_flight("qback") == 3
    assert release(leased[1:2]) == [leased[1]["id"]]
    assert queue_in_flight("qback") == 2
    assert fail(leased[2], discard=True) == "dead"
    assert queue_in_flight("qback") == 1
    # The reaper: expire the last lease.
    rows("UPDATE lonnymq_message SET lease_until = 1 WHERE id = %s", [leased[3]["id"]])
    assert reap() == 1
    assert queue_in_flight("qback") == 0
    assert_healthy()


@pytest.mark.django_db
def test_a_queue_without_limits_flags_nothing_and_has_no_row():
    spread("free", channels=3, per_channel=2)
    leased = dequeue("free", batch=6)
    assert len(leased) == 6
    assert not any(m["queue_slot"] for m in messages_of("free"))
    assert not QueueConfig.objects.filter(queue="free").exists()
    ack(leased)


@pytest.mark.django_db
def test_a_cap_set_while_messages_run_counts_them():
    spread("qlate", channels=5, per_channel=2)
    running = dequeue("qlate", batch=5)
    api.configure_queue("qlate", max_concurrency=3)
    assert queue_in_flight("qlate") == 5
    assert dequeue("qlate", batch=5) == []
    ack(running[:3])
    assert queue_in_flight("qlate") == 2
    assert len(dequeue("qlate", batch=5)) == 1
    assert_healthy()


@pytest.mark.django_db
def test_removing_every_limit_deletes_the_row_and_other_limits_are_kept():
    api.configure_queue("qcfg", max_concurrency=5, rate="50 / s, burst 10")
    config = QueueConfig.objects.get(queue="qcfg")
    assert (config.max_concurrency, config.rate) == (5, Rate(50, timedelta(seconds=1), 10))
    api.configure_queue("qcfg", max_concurrency=None)
    config.refresh_from_db()
    assert (config.max_concurrency, config.rate_count) == (None, 50)
    assert api.configure_queue("qcfg", rate=None) is False
    assert not QueueConfig.objects.filter(queue="qcfg").exists()


@pytest.mark.django_db
def test_a_queue_bucket_limits_every_channel_together():
    api.configure_queue("qrate", rate=Rate(5, timedelta(hours=1), burst=3))
    spread("qrate", channels=4, per_channel=3)
    first = dequeue("qrate", batch=10)
    assert sorted(r["channel"] for r in first) == ["c0", "c1", "c2"]
    assert dequeue("qrate", batch=10) == []
    row = rows("SELECT * FROM lonnymq_queue_config WHERE queue = 'qrate'")[0]
    assert row["next_token_at"] == row["last_release_at"] + 720_000  # 1 h / 5
    # An idle worker sleeps until the queue's next token, not until its due channels.
    due_in = named("next_due", queues=["qrate"])
    assert 700_000 <= due_in <= 720_000
    assert_healthy()


@pytest.mark.django_db
def test_a_queue_at_its_cap_has_no_due_time_for_idle_workers():
    api.configure_queue("qidle", max_concurrency=1)
    spread("qidle", channels=2, per_channel=2)
    leased = dequeue("qidle")
    assert named("next_due", queues=["qidle"]) is None
    ack(leased)
    assert named("next_due", queues=["qidle"]) <= 0


@pytest.mark.django_db
def test_check_reports_a_queue_counter_that_disagrees_with_the_leases():
    api.configure_queue("qbad", max_concurrency=3)
    spread("qbad", channels=1, per_channel=2)
    dequeue("qbad")
    rows("UPDATE lonnymq_queue_config SET in_flight = 2 WHERE queue = 'qbad'")
    problems = api.check(grace=0.1)
    assert [(p.queue, p.channel, p.problem) for p in problems] == [("qbad", None, "queue_in_flight_mismatch")]


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
@pytest.mark.django_db(transaction=True)
def test_concurrent_dequeuers_never_over_admit(connect):
    """Eight connections dequeue and ack as fast as they can against a cap of 3 over 40
    channels; a watcher counts the leased messages in its own snapshots."""
    api.configure_queue("qrace", max_concurrency=3)
    spread("qrace", channels=40, per_channel=10)
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []
    done = Counter[str]()

    def dequeuer(batch: int) -> None:
        conn = connect()
        try:
            while not stop.is_set():
                got = dequeue("qrace", batch=batch, conn=conn)
                if got:
                    time.sleep(0.002)
                    ack(got, conn=conn)
                    done.update(r["channel"] for r in got)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def watcher() -> None:
        conn = connect()
        while not stop.is_set():
            seen.append(leased_count("qrace", conn))

    threads = [threading.Thread(target=dequeuer, args=(1 + n % 3,)) for n in range(8)]
    threads.append(threading.Thread(target=watcher))
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while sum(done.values()) < 400 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert sum(done.values()) == 400
    assert max(seen) <= 3, f"{max(seen)} leases at once under a cap of 3"
    assert 3 in seen  # the test could have failed: the cap was reached
    assert queue_in_flight("qrace") == 0
    assert_healthy()


# ---------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------


@pytest.fixture
def nothing_written():
    api.configure_queue("bad", max_concurrency=2)
    before = counts()
    yield
    assert counts() == before, "a refused call wrote rows"
    config = QueueConfig.objects.get(queue="bad")
    assert (config.max_concurrency, config.rate_count) == (2, None)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_concurrency": -1}, "max_concurrency"),
        ({"max_concurrency": "3"}, "max_concurrency"),
        ({"rate": "0 / s"}, "rate.count"),
        ({"rate": "5 / 0 s"}, "rate.period"),
        ({"rate": "5 / s, burst 0"}, "rate.burst"),
        ({"rate": "5 / 367 d"}, "rate.period"),
        ({"rate": "lots"}, "rate"),
    ],
)
def test_bad_queue_limits_are_refused_in_python(nothing_written, kwargs, field):
    with pytest.raises(InvalidArgument) as caught:
        api.configure_queue("bad", **kwargs)
    assert caught.value.field == field


@pytest.mark.django_db
def test_bad_queue_names_are_refused(nothing_written):
    for name in ("", " ", "q" * 101, "a\x00b", 5):
        with pytest.raises(InvalidArgument) as caught:
            api.configure_queue(name, max_concurrency=1)
        assert caught.value.field == "queue"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"rate_count": 0, "rate_period_ms": 1000, "rate_burst": 1}, "rate_count"),
        ({"rate_count": 5, "rate_period_ms": 0, "rate_burst": 1}, "rate_period_ms"),
        ({"rate_count": 5, "rate_period_ms": 31_622_400_001, "rate_burst": 1}, "rate_period_ms"),
        ({"rate_count": 5, "rate_period_ms": 1000, "rate_burst": 0}, "rate_burst"),
        ({"rate_count": 5, "rate_period_ms": None, "rate_burst": 1}, "rate_period_ms"),
    ],
)
def test_the_sql_function_refuses_bad_queue_limits(nothing_written, params, field):
    full = {"queue": "bad", "max_concurrency": None, "unlimited": False, "rate_count": None,
            "rate_period_ms": None, "rate_burst": None, "no_rate": False, **params}  # fmt: skip
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        named("configure_queue", **full)
    assert caught.value.field == field


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("assignment", "constraint"),
    [
        ("max_concurrency = 0", "lonnymq_queue_config_max_concurrency_positive"),
        ("max_concurrency = NULL", "lonnymq_queue_config_has_a_limit"),
        ("rate_count = 5", "lonnymq_queue_config_rate_complete"),
        ("rate_count = 5, rate_period_ms = 0, rate_burst = 1", "lonnymq_queue_config_rate_period_range"),
        ("rate_count = 5, rate_period_ms = 1000, rate_burst = 0", "lonnymq_queue_config_rate_burst_range"),
        ("in_flight = -1", "lonnymq_queue_config_in_flight_nonnegative"),
    ],
)
def test_the_schema_refuses_bad_queue_limits_written_directly(nothing_written, assignment, constraint):
    with pytest.raises(IntegrityError) as caught, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE lonnymq_queue_config SET {assignment} WHERE queue = 'bad'")
    assert caught.value.__cause__.diag.constraint_name == constraint
    assert isinstance(translate(caught.value), InvalidArgument)


@pytest.mark.django_db
def test_the_largest_queue_rate_after_a_long_pause_does_not_stop_the_queue():
    api.configure_queue("qhuge", rate=Rate(1_000_000, timedelta(days=366), burst=1_000_000))
    spread("qhuge", channels=3, per_channel=1)
    assert len(dequeue("qhuge")) == 1
    rows("UPDATE lonnymq_queue_config SET last_release_at = 1, bucket_level = 0 WHERE queue = 'qhuge'")
    assert len(dequeue("qhuge", batch=10)) == 2
    assert_healthy()
