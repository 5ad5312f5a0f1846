"""Cron and interval maths of periodic schedules: pure Python, no database (the ticking
against PostgreSQL is tests/schedules/test_periodic.py)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from django_lonnymq import Message, schedules
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.schedules import Timing

QUEUE = "p_reports"
GREENLAND = ["America/Nuuk", "America/Godthab", "America/Scoresbysund"]


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@pytest.mark.parametrize("zone", ["America/New_York", "Europe/Paris", "Australia/Sydney", "America/Santiago"])
@pytest.mark.parametrize("cron", ["30 2 * * *", "0 1 * * *", "*/20 * * * *", "15 0-3 * * *"])
def test_catching_up_finds_the_same_ticks_as_walking_forward(cron, zone):
    """due() starts from the end (reverse iteration); it must list what next_after() walks to."""
    timing = Timing(cron, None, zone)
    start = ms(datetime(2026, 3, 1, tzinfo=UTC))
    end = (
        ms(datetime(2026, 4, 10, tzinfo=UTC)) if "*/20" not in cron else ms(datetime(2026, 3, 10, tzinfo=UTC))
    )
    walked, at = [], timing.next_after(start - 1)
    while at <= end:
        walked.append(at)
        at = timing.next_after(at)
    assert timing.due(start, end, 100_000) == walked
    assert timing.due(start, end, 3) == walked[-3:]
    assert timing.due(end + 1, end, 3) == []


def test_message_scheduled_at_reads_the_tick():
    message = Message(
        1, QUEUE, "default", {}, 1, 5, datetime.now(UTC), dedup_key="lonnymq.periodic:7:1700000000000"
    )
    assert message.scheduled_at == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert Message(1, QUEUE, "default", {}, 1, 5, datetime.now(UTC), dedup_key="mine").scheduled_at is None
    assert Message(1, QUEUE, "default", {}, 1, 5, datetime.now(UTC)).scheduled_at is None


def test_declared_json_is_stable():
    periodic_declaration = schedules.Declaration(
        "n", QUEUE, "default", Timing(None, 1000, "UTC"), {"b": 1, "a": 2}, 1, None, "x.y"
    )
    text = json.dumps(periodic_declaration.declared(), sort_keys=True)
    assert json.loads(text)["every_ms"] == 1000


# ---------------------------------------------------------------------------------------
# Security: look-alike functions and operators planted in public never run
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("zone", GREENLAND)
def test_timing_gives_up_a_walk_that_does_not_end_at_once(zone):
    timing = Timing("0 * 28 * *", None, zone)
    april = ms(datetime(2026, 4, 28, tzinfo=ZoneInfo(zone)))
    started = time.monotonic()
    with pytest.raises(InvalidArgument) as raised:
        timing.due(april, april, 2)
    assert raised.value.field == "cron" and raised.value.value == "0 * 28 * *"
    assert zone in str(raised.value) and "steps" in str(raised.value)
    assert time.monotonic() - started < 5
    # The walk forward has no such trouble: the next tick is May's.
    assert timing.next_after(april) == april + 3_600_000


def test_the_cron_walk_counts_its_steps():
    """The bound hooks into cronsim's search loop (its month step): if a cronsim release
    renamed that step, the walks would go uncounted, and this fails at once."""
    from cronsim import CronSim

    assert all(callable(getattr(CronSim, step, None)) for step in ("advance_month", "reverse_month"))
    budget = schedules._Budget()
    timing = Timing("0 0 29 2 *", None, "Europe/Paris")
    start = ms(datetime(2026, 1, 1, tzinfo=UTC))
    timing.next_after(start, budget)
    timing.due(start, ms(datetime(2040, 1, 1, tzinfo=UTC)), 3, budget)
    assert 0 < schedules.CRON_CHECK_STEPS - budget.left < 1000
    with pytest.raises(InvalidArgument, match="used up the 2 steps of one computation"):
        timing.next_after(start, schedules._Budget(steps=2))


def test_iana_names_and_utc_are_accepted():
    for zone in ("UTC", "Etc/UTC", "Europe/Paris", "America/Nuuk", "America/Godthab"):
        assert schedules.check_timezone(zone) == zone
