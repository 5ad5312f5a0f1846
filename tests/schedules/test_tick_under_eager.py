"""A periodic tick in a plain TestCase: ``testing.tick()`` ticks due schedules on the test's
connection, and under eager mode their handlers run, as any enqueue's would."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from django_lonnymq import Message, handler, periodic, schedules
from django_lonnymq.models import Schedule
from django_lonnymq.testing import assert_enqueued, eager, tick

QUEUE = "eager_tick"
RAN: list[dict] = []


@handler(QUEUE)
def report(message: Message) -> None:
    RAN.append(message.payload)


@pytest.fixture
def declared() -> Iterator[None]:
    before = {d.name for d in schedules.declarations()}
    RAN.clear()
    periodic(every=60, queue=QUEUE, name="eager-tick-report", payload={"report": "daily"})(report)
    yield
    RAN.clear()
    for declaration in schedules.declarations():
        if declaration.name not in before:
            schedules.forget(declaration.name)


@pytest.mark.django_db
def test_a_due_tick_runs_its_handler_under_eager(declared):
    with eager():
        assert tick(QUEUE) == 0  # the first tick is a minute away: nothing is due yet
        assert RAN == []
        assert tick(QUEUE, at=timezone.now() + timedelta(seconds=61)) == 1
    assert RAN == [{"report": "daily"}]
    assert Schedule.objects.get(name="eager-tick-report").last_tick_at is not None


@pytest.mark.django_db
def test_without_eager_the_tick_is_enqueued_once(declared):
    later = timezone.now() + timedelta(seconds=61)
    assert tick(QUEUE, at=later) == 1
    assert tick(QUEUE, at=later) == 0  # the same tick is never enqueued twice
    assert_enqueued(QUEUE, payload={"report": "daily"}, count=1)
    assert RAN == []
