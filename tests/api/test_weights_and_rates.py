"""Channel weights (weighted round robin) and token buckets (N per period, burst B)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction

from django_lonnymq import api, enqueue_many
from django_lonnymq.exceptions import InvalidArgument, translate
from django_lonnymq.models import Channel
from django_lonnymq.rates import Rate
from tests.harness.helpers import (
    LEASE_MS,
    ack,
    assert_healthy,
    channel_row,
    configure,
    counts,
    db_now_ms,
    dequeue,
)

# ---------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------


def backlog(queue: str, weights: dict[str, int], per_channel: int) -> None:
    for name, weight in weights.items():
        api.configure_channel(queue, name, weight=weight)
    for name in weights:
        enqueue_many(queue, list(range(per_channel)), channel=name)


@pytest.mark.django_db
@pytest.mark.parametrize("batch", [1, 50])
def test_weights_1_2_3_share_the_releases_1_2_3(batch):
    weights = {"w1": 1, "w2": 2, "w3": 3}
    backlog("weighted", weights, per_channel=400)
    released: Counter[str] = Counter()
    while sum(released.values()) < 600:
        got = dequeue("weighted", batch=batch)
        assert got, "a backlogged queue released nothing"
        released.update(r["channel"] for r in got)
    total = sum(released.values())
    assert total == 600
    for name, weight in weights.items():
        expected = total * weight / sum(weights.values())
        assert abs(released[name] - expected) <= 0.05 * expected, (released, name)
    assert_healthy()


@pytest.mark.django_db
def test_a_weighted_channel_keeps_its_turn_for_its_weight_and_the_rotation_is_unchanged():
    backlog("turns", {"a": 1, "b": 2, "c": 3}, per_channel=20)
    order = [dequeue("turns", batch=1)[0]["channel"] for _ in range(18)]
    assert order == ["a", "b", "b", "c", "c", "c"] * 3
    # FIFO inside each channel is untouched.
    assert_healthy()


@pytest.mark.django_db
def test_fifo_inside_a_weighted_channel():
    api.configure_channel("fifo-w", "heavy", weight=4)
    sent = enqueue_many("fifo-w", list(range(30)), channel="heavy")
    enqueue_many("fifo-w", list(range(30)), channel="light")
    got = [r["id"] for _ in range(6) for r in dequeue("fifo-w", batch=7) if r["channel"] == "heavy"]
    assert got == sent[: len(got)]
    assert len(got) >= 24


@pytest.mark.django_db
def test_weight_does_not_lift_a_concurrency_cap():
    api.configure_channel("wcap", "capped", weight=5, max_concurrency=2)
    enqueue_many("wcap", list(range(10)), channel="capped")
    first = dequeue("wcap", batch=10)
    assert len(first) == 2
    assert dequeue("wcap", batch=10) == []
    ack(first)
    assert len(dequeue("wcap", batch=1)) == 1
    assert_healthy()


# ---------------------------------------------------------------------------------------
# Token bucket
# ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_full_bucket_releases_its_burst_then_waits_for_its_next_token():
    api.configure_channel("bucket", "b", rate=Rate(1, timedelta(hours=1), burst=3))
    enqueue_many("bucket", list(range(10)), channel="b")
    first = dequeue("bucket", batch=10)
    assert len(first) == 3
    row = channel_row("bucket", "b")
    # The empty bucket costs nothing: the channel's next turn is its next token, an hour on.
    assert row["next_token_at"] == row["last_dequeue_at"] + 3_600_000
    assert row["next_dequeue_at"] == row["next_token_at"]
    assert row["bucket_level"] == 0
    assert dequeue("bucket", batch=10) == []
    assert_healthy()


@pytest.mark.django_db
def test_release_interval_and_a_bucket_of_one_behave_alike():
    api.configure_channel("alike", "interval", release_interval=timedelta(hours=1))
    api.configure_channel("alike", "bucket", rate="1 / h")
    enqueue_many("alike", list(range(5)), channel="interval")
    enqueue_many("alike", list(range(5)), channel="bucket")
    got = Counter(r["channel"] for r in dequeue("alike", batch=10))
    assert got == {"interval": 1, "bucket": 1}
    assert dequeue("alike", batch=10) == []
    interval, bucket = channel_row("alike", "interval"), channel_row("alike", "bucket")
    assert interval["next_dequeue_at"] - interval["last_dequeue_at"] == 3_600_000
    assert bucket["next_dequeue_at"] - bucket["last_dequeue_at"] == 3_600_000


@pytest.mark.django_db
def test_a_new_message_does_not_wake_a_channel_before_its_next_token():
    api.configure_channel("nowake", "b", rate="1 / h")
    enqueue_many("nowake", [1], channel="b")
    assert len(dequeue("nowake")) == 1
    enqueue_many("nowake", [2], channel="b")
    assert dequeue("nowake") == []
    row = channel_row("nowake", "b")
    assert row["next_dequeue_at"] == row["next_token_at"] > db_now_ms() + 3_500_000
    assert_healthy()


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
@pytest.mark.django_db(transaction=True)
def test_token_bucket_bound_holds_in_every_window(connect):
    """10 per second, burst 5, backlogged, three dequeuers: in every window of the run, at
    most burst + 10 * t releases (times are the database's, recorded by the dequeue's
    lease); over 10 s, at least 95% of what the bound allows."""
    count, period_ms, burst = 10, 1000, 5
    api.configure_channel("tb", "b", rate=Rate(count, timedelta(milliseconds=period_ms), burst=burst))
    enqueue_many("tb", list(range(400)), channel="b")
    enqueue_many("tb", list(range(400)), channel="free")
    released: list[int] = []
    free = [0]
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def dequeuer() -> None:
        conn = connect()
        try:
            while not stop.is_set():
                for row in dequeue("tb", batch=4, conn=conn):
                    with lock:
                        if row["channel"] == "b":
                            released.append(row["lease_until"] - LEASE_MS)
                        else:
                            free[0] += 1
                time.sleep(0.002)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=dequeuer) for _ in range(3)]
    start = db_now_ms()
    for thread in threads:
        thread.start()
    while db_now_ms() < start + 10_500:
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join()
    assert not errors, errors
    times = sorted(released)
    assert times, "the bucket released nothing"
    for i in range(len(times)):
        for j in range(i, len(times)):
            in_window = j - i + 1
            assert (in_window - burst) * period_ms <= count * (times[j] - times[i]), (
                f"{in_window} releases within {times[j] - times[i]} ms"
            )
    first = times[0]
    within = sum(1 for t in times if t <= first + 10_000)
    allowed = burst + count * 10
    assert within >= 0.95 * allowed, f"{within} of {allowed} allowed releases in 10 s"
    assert free[0] > within  # the unlimited channel beside it was not held back
    assert_healthy()


# ---------------------------------------------------------------------------------------
# Configuration and bad input
# ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_configure_channel_sets_weight_and_rate_and_keeps_what_it_is_not_given():
    channel_id = api.configure_channel("cfg", "c", weight=3, rate="100 / min, burst 20")
    channel = Channel.objects.get(pk=channel_id)
    assert (channel.weight, channel.rate_count, channel.rate_period_ms, channel.rate_burst) == (
        3,
        100,
        60_000,
        20,
    )
    api.configure_channel("cfg", "c", max_concurrency=2)
    channel.refresh_from_db()
    assert (channel.weight, channel.rate_count, channel.max_concurrency) == (3, 100, 2)
    api.configure_channel("cfg", "c", rate=None, weight=1)
    channel.refresh_from_db()
    assert (channel.weight, channel.rate_count, channel.rate_period_ms, channel.rate_burst) == (
        1,
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("100 / min, burst 20", Rate(100, timedelta(minutes=1), 20)),
        ("10/s", Rate(10, timedelta(seconds=1), 1)),
        ("5 per 2 hours, burst 5", Rate(5, timedelta(hours=2), 5)),
        ("1 / 250 ms", Rate(1, timedelta(milliseconds=250), 1)),
        ("3 / d", Rate(3, timedelta(days=1), 1)),
    ],
)
def test_rates_read_and_write_human_units(text, rate):
    assert Rate.parse(text) == rate
    assert Rate.parse(str(rate)) == rate


@pytest.fixture
def nothing_written():
    enqueue_many("bad", ["x"], channel="existing")
    before = counts()
    yield
    assert counts() == before, "a refused call wrote rows"
    channel = Channel.objects.get(queue="bad", name="existing")
    assert (channel.weight, channel.rate_count) == (1, None)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"weight": 0}, "weight"),
        ({"weight": -2}, "weight"),
        ({"weight": 1001}, "weight"),
        ({"weight": 2.0}, "weight"),
        ({"weight": True}, "weight"),
        ({"rate": "0 / min"}, "rate.count"),
        ({"rate": "-1 / min"}, "rate"),
        ({"rate": "5 / 0 s"}, "rate.period"),
        ({"rate": "5 / min, burst 0"}, "rate.burst"),
        ({"rate": "5 / 400 d"}, "rate.period"),
        ({"rate": "5 / fortnight"}, "rate"),
        ({"rate": 5}, "rate"),
        ({"rate": "5 / 0.5 ms"}, "rate.period"),
    ],
)
def test_bad_weights_and_rates_are_refused_in_python(nothing_written, kwargs, field):
    with pytest.raises(InvalidArgument) as caught:
        api.configure_channel("bad", "existing", **kwargs)
    assert caught.value.field == field
    assert str(caught.value).startswith(field)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"count": 0, "period": timedelta(minutes=1)}, "rate.count"),
        ({"count": 5, "period": timedelta(0)}, "rate.period"),
        ({"count": 5, "period": timedelta(seconds=-1)}, "rate.period"),
        ({"count": 5, "period": timedelta(days=367)}, "rate.period"),
        ({"count": 5, "period": timedelta(minutes=1), "burst": 0}, "rate.burst"),
        ({"count": 5, "period": 60}, "rate.period"),
    ],
)
def test_bad_rates_are_refused_when_built(kwargs, field):
    with pytest.raises(InvalidArgument) as caught:
        Rate(**kwargs)
    assert caught.value.field == field


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("weight", "rate", "field"),
    [
        (0, None, "weight"),
        (None, (0, 1000, 1), "rate_count"),
        (None, (5, 0, 1), "rate_period_ms"),
        (None, (5, -1000, 1), "rate_period_ms"),
        (None, (5, 31_622_400_001, 1), "rate_period_ms"),
        (None, (5, 1000, 0), "rate_burst"),
    ],
)
def test_the_sql_function_refuses_bad_weights_and_rates(nothing_written, weight, rate, field):
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        configure("bad", "existing", weight=weight, rate=rate)
    assert caught.value.field == field


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("assignment", "constraint"),
    [
        # Weight 0 breaks two rules (round_used < weight too): either name will do.
        ("weight = 0", "lonnymq_channel_weight_range lonnymq_channel_round_used_range"),
        ("weight = 1001", "lonnymq_channel_weight_range"),
        ("rate_count = 5", "lonnymq_channel_rate_complete"),
        ("rate_count = 0, rate_period_ms = 1000, rate_burst = 1", "lonnymq_channel_rate_count_range"),
        ("rate_count = 5, rate_period_ms = 0, rate_burst = 1", "lonnymq_channel_rate_period_range"),
        ("rate_count = 5, rate_period_ms = 31622400001, rate_burst = 1", "lonnymq_channel_rate_period_range"),
        ("rate_count = 5, rate_period_ms = 1000, rate_burst = 0", "lonnymq_channel_rate_burst_range"),
    ],
)
def test_the_schema_refuses_bad_weights_and_rates_written_directly(nothing_written, assignment, constraint):
    with pytest.raises(IntegrityError) as caught, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE lonnymq_channel SET {assignment} WHERE queue = 'bad' AND name = 'existing'")
    assert caught.value.__cause__.diag.constraint_name in constraint.split()
    assert isinstance(translate(caught.value), InvalidArgument)


@pytest.mark.django_db
def test_the_largest_rate_after_a_long_pause_does_not_stop_the_queue():
    """burst x period x count is far beyond bigint: a refill over decades must not overflow
    (the refill counts the time since the last release, at most about 2e12 ms, times the
    count, at most 1e6)."""
    api.configure_channel("huge", "b", rate=Rate(1_000_000, timedelta(days=366), burst=1_000_000))
    enqueue_many("huge", list(range(3)), channel="b")
    assert len(dequeue("huge", batch=1)) == 1
    # The last release long ago, the bucket empty then.
    connection.cursor().execute(
        "UPDATE lonnymq_channel SET last_dequeue_at = 1, bucket_level = 0 WHERE queue = 'huge'"
    )
    assert len(dequeue("huge", batch=10)) == 2
    assert_healthy()
