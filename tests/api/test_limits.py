"""Per-channel limits: rate (release_interval), concurrency (max_concurrency), pause."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from django_lonnymq import Item, api, enqueue, enqueue_many
from django_lonnymq.models import Channel
from tests.harness.helpers import (
    ack,
    assert_healthy,
    channel_row,
    configure,
    db_now_ms,
    dequeue,
    fail,
    messages_of,
    release,
)

pytestmark = pytest.mark.django_db

INTERVAL_MS = 300


def wait_until_db_ms(target_ms: int) -> None:
    while (left := target_ms - db_now_ms()) >= 0:
        time.sleep(left / 1000 + 0.005)


# ---------------------------------------------------------------------------------------
# Rate limit
# ---------------------------------------------------------------------------------------


def test_configure_channel_sets_the_limits_on_the_model():
    channel_id = api.configure_channel("lim", "t1", max_concurrency=3, release_interval=timedelta(seconds=2))
    channel = Channel.objects.get(pk=channel_id)
    assert (channel.queue, channel.name) == ("lim", "t1")
    assert channel.max_concurrency == 3
    assert channel.release_interval_ms == 2000
    assert channel.paused is False
    # Omitted limits keep their value; None means unlimited.
    api.configure_channel("lim", "t1", paused=True)
    channel.refresh_from_db()
    assert (channel.max_concurrency, channel.release_interval_ms, channel.paused) == (3, 2000, True)
    api.configure_channel("lim", "t1", max_concurrency=None, release_interval=None, paused=False)
    channel.refresh_from_db()
    assert (channel.max_concurrency, channel.release_interval_ms, channel.paused) == (None, 0, False)


def test_release_interval_keeps_two_releases_of_a_channel_apart():
    api.configure_channel("rate", "slow", release_interval=INTERVAL_MS / 1000)
    sent = enqueue_many("rate", ["a", "b", "c"], channel="slow")
    other = enqueue("rate", "x", channel="free")

    first = dequeue("rate", batch=10)
    # A rate-limited channel releases one message per call, however large the batch.
    assert [r["channel"] for r in first].count("slow") == 1
    assert [r["id"] for r in first if r["channel"] == "slow"] == [sent[0]]
    assert other in [r["id"] for r in first]
    released_at = channel_row("rate", "slow")["last_dequeue_at"]
    assert channel_row("rate", "slow")["next_dequeue_at"] >= released_at + INTERVAL_MS

    right_after = dequeue("rate", batch=10)
    checked_at = db_now_ms()
    if checked_at < released_at + INTERVAL_MS:  # always, unless this machine stalled
        assert right_after == [], f"released again {checked_at - released_at} ms after the last release"

    wait_until_db_ms(released_at + INTERVAL_MS)
    second = dequeue("rate", batch=10)
    assert [r["id"] for r in second] == [sent[1]]
    second_at = channel_row("rate", "slow")["last_dequeue_at"]
    assert second_at - released_at >= INTERVAL_MS

    wait_until_db_ms(second_at + INTERVAL_MS)
    assert [r["id"] for r in dequeue("rate", batch=10)] == [sent[2]]
    assert channel_row("rate", "slow")["last_dequeue_at"] - second_at >= INTERVAL_MS
    assert_healthy()


def test_an_enqueue_into_a_rate_limited_idle_channel_waits_for_the_interval():
    api.configure_channel("rate", "slow", release_interval=3600)
    enqueue("rate", "a", channel="slow")
    [first] = dequeue("rate")
    ack([first])
    released_at = channel_row("rate", "slow")["last_dequeue_at"]
    # The channel was idle; a new message may still not go before the interval is over (an
    # hour: however slow this machine, it has not passed).
    late = enqueue("rate", "b", channel="slow")
    assert dequeue("rate") == []  # applies the enqueue's wake-up mark, no earlier than the interval
    assert channel_row("rate", "slow")["next_dequeue_at"] >= released_at + 3_600_000
    # With a short interval, it goes as soon as that much has passed since the last release.
    api.configure_channel("rate", "slow", release_interval=INTERVAL_MS / 1000)
    wait_until_db_ms(released_at + INTERVAL_MS)
    assert [r["id"] for r in dequeue("rate")] == [late]


def test_lowering_the_interval_takes_effect_on_the_next_dequeue():
    api.configure_channel("rate", "slow", release_interval=3600)
    enqueue_many("rate", ["a", "b"], channel="slow")
    assert len(dequeue("rate", batch=10)) == 1
    assert dequeue("rate", batch=10) == []
    api.configure_channel("rate", "slow", release_interval=0)
    assert len(dequeue("rate", batch=10)) == 1
    assert_healthy()


# ---------------------------------------------------------------------------------------
# Concurrency limit
# ---------------------------------------------------------------------------------------


def test_max_concurrency_caps_the_leases_of_a_channel_until_acks():
    configure("conc", "capped", max_concurrency=2)
    sent = enqueue_many("conc", [{"n": n} for n in range(6)], channel="capped")
    free = enqueue_many("conc", [Item(n, channel="free") for n in range(3)])

    first = dequeue("conc", batch=10)
    capped = [r for r in first if r["channel"] == "capped"]
    assert [r["id"] for r in capped] == sent[:2]
    assert sorted(r["id"] for r in first if r["channel"] == "free") == free
    assert channel_row("conc", "capped")["in_flight"] == 2

    # At its cap the channel releases nothing, batch after batch.
    for _ in range(3):
        assert [r for r in dequeue("conc", batch=10) if r["channel"] == "capped"] == []
    leased = [m for m in messages_of("conc") if m["channel_name"] == "capped" and m["lease_until"]]
    assert len(leased) == 2

    assert ack(capped[:1]) == [sent[0]]
    assert channel_row("conc", "capped")["in_flight"] == 1
    nxt = dequeue("conc", batch=10)
    assert [r["id"] for r in nxt] == [sent[2]]
    assert dequeue("conc", batch=10) == []

    # Any way a lease ends gives the slot back: fail (retry) and release too.
    assert fail(capped[1], retry_delay_ms=3_600_000) == "retry"
    assert [r["id"] for r in dequeue("conc", batch=10)] == [sent[3]]
    assert release(nxt) == [sent[2]]
    assert [r["id"] for r in dequeue("conc", batch=10)] == [sent[2]]
    assert channel_row("conc", "capped")["in_flight"] == 2
    assert_healthy()


def test_max_concurrency_is_never_exceeded_over_a_full_drain():
    configure("conc", "capped", max_concurrency=2)
    sent = enqueue_many("conc", [{"n": n} for n in range(15)], channel="capped")
    held: list[dict] = []
    done: list[int] = []
    peak = 0
    while len(done) < len(sent):
        held += dequeue("conc", batch=5)
        peak = max(peak, len(held))
        assert channel_row("conc", "capped")["in_flight"] == len(held) <= 2
        done += ack(held[:1])
        held = held[1:]
    assert peak == 2
    assert sorted(done) == sent
    assert channel_row("conc", "capped")["in_flight"] == 0


def test_a_new_limit_counts_the_leases_already_running():
    enqueue_many("conc", [1, 2, 3, 4], channel="c")
    early = dequeue("conc", batch=2)
    assert len(early) == 2
    configure("conc", "c", max_concurrency=1)
    assert channel_row("conc", "c")["in_flight"] == 2  # the running work counts at once
    assert dequeue("conc", batch=10) == []  # over the new limit: nothing more is released
    ack(early[:1])
    assert channel_row("conc", "c")["in_flight"] == 1
    assert dequeue("conc", batch=10) == []  # still at the limit
    ack(early[1:])
    assert channel_row("conc", "c")["in_flight"] == 0
    got = dequeue("conc", batch=10)
    assert len(got) == 1
    assert dequeue("conc", batch=10) == []
    ack(got)
    assert channel_row("conc", "c")["in_flight"] == 0
    assert_healthy()


# ---------------------------------------------------------------------------------------
# Pause
# ---------------------------------------------------------------------------------------


def test_a_paused_channel_releases_nothing_until_resumed():
    api.configure_channel("pause", "p", paused=True)
    sent = enqueue("pause", "x", channel="p")
    other = enqueue("pause", "y", channel="q")
    assert [r["id"] for r in dequeue("pause", batch=10)] == [other]
    assert dequeue("pause", batch=10) == []
    api.configure_channel("pause", "p", paused=False)
    assert [r["id"] for r in dequeue("pause", batch=10)] == [sent]
    assert_healthy()
