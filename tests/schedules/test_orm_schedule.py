"""A schedule inserted through the ORM ticks: its first tick is computed at save time, or the
save is refused with a clear error. The admin and @periodic time their rows themselves."""

from __future__ import annotations

import json

import psycopg
import pytest
from django.core import serializers
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from django_lonnymq import arguments
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.models import Schedule
from django_lonnymq.schedules import tick

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "orm_sched"


@pytest.fixture
def conn(connect) -> psycopg.Connection:
    return connect()


def queued(conn: psycopg.Connection) -> int:
    return conn.execute(
        "SELECT count(*) FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id"
        " WHERE c.queue = %s",
        [QUEUE],
    ).fetchone()[0]


def test_objects_create_gets_its_first_tick_and_ticks(conn):
    before = arguments.now_ms()
    schedule = Schedule.objects.create(name="orm-every", queue=QUEUE, every_ms=10_000)
    schedule.refresh_from_db()
    assert schedule.next_tick_at is not None
    assert before < schedule.next_tick_at <= arguments.now_ms() + 10_000
    assert schedule.next_tick_at % 10_000 == 0
    assert tick(conn, [QUEUE], now_ms=schedule.next_tick_at) == 1
    assert queued(conn) == 1


def test_a_cron_schedule_in_a_zone_gets_its_first_tick(conn):
    schedule = Schedule.objects.create(
        name="orm-cron", queue=QUEUE, cron="*/5 * * * *", timezone="Europe/Paris"
    )
    schedule.refresh_from_db()
    assert schedule.next_tick_at % 300_000 == 0 and schedule.next_tick_at > arguments.now_ms() - 1000


def test_a_given_next_tick_and_a_disabled_schedule_are_left_as_given():
    given = Schedule.objects.create(name="orm-given", queue=QUEUE, every_ms=10_000, next_tick_at=1234)
    off = Schedule.objects.create(name="orm-off", queue=QUEUE, every_ms=10_000, enabled=False)
    assert Schedule.objects.get(pk=given.pk).next_tick_at == 1234
    assert Schedule.objects.get(pk=off.pk).next_tick_at is None


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "0 7 * * *", "timezone": "Mars/Olympus_Mons"}, "timezone"),
        ({}, "cron"),  # no timing at all
        ({"cron": "0 7 * * *", "every_ms": 10_000}, "cron"),
    ],
)
def test_a_timing_that_cannot_tick_is_refused_at_save_and_nothing_is_written(fields, field):
    with pytest.raises(InvalidArgument) as refused:
        Schedule.objects.create(name="orm-bad", queue=QUEUE, **fields)
    assert refused.value.field == field
    assert not Schedule.objects.filter(name="orm-bad").exists()


def test_a_fixture_without_a_next_tick_gets_one():
    fields = {"name": "orm-fixture", "queue": QUEUE, "every_ms": 60000, "timezone": "UTC", "enabled": True}
    data = json.dumps([{"model": "django_lonnymq.schedule", "fields": fields}])
    for obj in serializers.deserialize("json", data):
        obj.save()
    assert Schedule.objects.get(name="orm-fixture").next_tick_at % 60_000 == 0


def test_a_data_migrations_historical_model_gets_a_first_tick():
    apps = MigrationExecutor(connection).loader.project_state().apps
    historical = apps.get_model("django_lonnymq", "Schedule")
    assert historical is not Schedule
    historical.objects.create(name="orm-migration", queue=QUEUE, every_ms=30_000)
    assert Schedule.objects.get(name="orm-migration").next_tick_at % 30_000 == 0
