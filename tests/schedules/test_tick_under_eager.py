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



@pytest.mark.django_db
def test_a_tick_as_the_first_query_of_a_test_is_rolled_back_with_it(declared):
    """The test's own transaction holds the tick: nothing of it outlives the test. The test's
    atomic has sent nothing to the server yet, so only tick()'s own savepoint puts the tick's
    statements inside it (without one, psycopg committed them for real)."""
    import psycopg
    from django.db import connections

    from tests.conftest import test_dsn

    wrapper = connections["default"]
    wrapper.ensure_connection()
    assert wrapper.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert tick(QUEUE, at=timezone.now() + timedelta(seconds=61)) == 1
    with psycopg.connect(test_dsn(), autocommit=True) as other:  # sees only what was committed
        seen = other.execute(
            "SELECT count(*) FROM lonnymq_schedule WHERE name = 'eager-tick-report'"
        ).fetchone()
    assert seen == (0,)
