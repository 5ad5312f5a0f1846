"""The Schedule admin: list with next and last tick, pause and resume, edit the timing or the
payload (validated by the rules of @periodic), add schedules that live only in the database,
and permissions like the rest of the admin."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse
from django.utils.html import escape

from django_lonnymq import api
from django_lonnymq.models import Schedule

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:django_lonnymq_schedule_changelist")
ADD = reverse("admin:django_lonnymq_schedule_add")
PERMS = ["view_schedule", "change_schedule", "add_schedule"]


def change_url(schedule: Schedule) -> str:
    return reverse("admin:django_lonnymq_schedule_change", args=[schedule.pk])


def schedule(name: str = "nightly", **fields: object) -> Schedule:
    values: dict[str, object] = {"queue": "reports", "cron": "0 3 * * *", "timezone": "Europe/Paris"}
    values.update(fields)
    if "every_ms" in fields:
        values["cron"] = None
    return Schedule.objects.create(name=name, next_tick_at=api.now_ms() + 3_600_000, **values)


def form_data(**overrides: object) -> dict[str, object]:
    data: dict[str, object] = {
        "name": "tenant-42-digest",
        "queue": "reports",
        "channel": "tenant-42",
        "cron": "30 6 * * 1-5",
        "every_seconds": "",
        "timezone": "Europe/Paris",
        "payload": '{"tenant": 42}',
        "catch_up": "1",
        "max_attempts": "",
        "enabled": "on",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def test_the_list_shows_timing_next_and_last_tick(admin_client):
    schedule("nightly", last_tick_at=1_700_000_000_000, declared={"queue": "reports"})
    schedule("every-minute", every_ms=60_000)
    page = admin_client.get(CHANGELIST).content.decode()
    assert "0 3 * * * (Europe/Paris)" in page and "every 60 s" in page
    assert "in code" in page and "in the admin" in page
    assert "Nov. 14, 2023" in page  # the last tick, as a date


def test_add_a_database_only_schedule_computes_its_first_tick(admin_client):
    before = api.now_ms()
    response = admin_client.post(ADD, form_data())
    assert response.status_code == 302, response.content.decode()[:2000]
    added = Schedule.objects.get(name="tenant-42-digest")
    assert added.declared is None and added.enabled and added.payload == {"tenant": 42}
    assert added.next_tick_at > before
    tick = datetime.fromtimestamp(added.next_tick_at / 1000, UTC)
    from zoneinfo import ZoneInfo

    local = tick.astimezone(ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute) == (6, 30) and local.weekday() < 5


def test_add_with_an_interval(admin_client):
    response = admin_client.post(ADD, form_data(cron="", every_seconds="15"))
    assert response.status_code == 302, response.content.decode()[:2000]
    added = Schedule.objects.get(name="tenant-42-digest")
    assert added.cron is None and added.every_ms == 15_000 and added.next_tick_at % 15_000 == 0


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"cron": "61 * * * *"}, "cron", "not a valid cron expression"),
        ({"cron": "* * *"}, "cron", "five fields"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone", "known IANA time zone"),
        ({"timezone": "localtime"}, "timezone", "IANA time zone name"),
        ({"timezone": "posixrules"}, "timezone", "IANA time zone name"),
        ({"cron": "", "every_seconds": "0"}, "every_seconds", "longer than zero"),
        ({"cron": "", "every_seconds": "0.5"}, "every_seconds", "between 1 second and 366 days"),
        ({"every_seconds": "10"}, "every_seconds", "not both"),
        ({"cron": ""}, "cron", "Give a cron expression"),
        ({"payload": "{not json"}, "payload", "Enter a valid JSON"),
        ({"catch_up": "0"}, "catch_up", "Catch up must be between 1 and 1000"),
        ({"queue": "   "}, "queue", "required"),
    ],
    ids=["bad-cron", "four-fields", "unknown-zone", "host-localtime", "host-posixrules", "zero-interval", "sub-second", "both", "none",
         "payload-not-json", "catch-up-0", "blank-queue"],
)  # fmt: skip
def test_bad_input_is_refused_on_its_field_and_nothing_is_written(admin_client, overrides, field, text):
    response = admin_client.post(ADD, form_data(**overrides))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors or "__all__" in errors, errors
    assert text in str(errors), errors
    assert not Schedule.objects.exists()


def test_a_name_used_twice_is_refused(admin_client):
    schedule("tenant-42-digest")
    response = admin_client.post(ADD, form_data())
    assert response.status_code == 200
    assert "already exists" in str(response.context["adminform"].form.errors)
    assert Schedule.objects.count() == 1


def test_editing_the_payload_keeps_the_next_tick_and_the_workers_columns(admin_client):
    row = schedule("nightly", payload={"v": 1}, last_tick_at=5, last_message_id=9)
    next_tick = row.next_tick_at
    # A worker ticks meanwhile: the form's stale values must not overwrite what it wrote.
    Schedule.objects.filter(pk=row.pk).update(last_tick_at=7, last_message_id=11)
    data = form_data(name="nightly", cron="0 3 * * *", channel="default", payload='{"v": 2}')
    response = admin_client.post(change_url(row), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    row.refresh_from_db()
    assert row.payload == {"v": 2} and row.next_tick_at == next_tick
    assert (row.last_tick_at, row.last_message_id) == (7, 11)


def test_editing_the_timing_recomputes_the_next_tick(admin_client):
    row = schedule("nightly")
    data = form_data(name="nightly", cron="", every_seconds="5", channel="default", payload="{}")
    before = api.now_ms()
    assert admin_client.post(change_url(row), data).status_code == 302
    row.refresh_from_db()
    assert row.cron is None and row.every_ms == 5000
    assert before < row.next_tick_at <= before + 5000 + 1000


def test_a_declared_schedule_keeps_its_name_and_says_where_it_comes_from(admin_client):
    row = schedule("app.handlers.nightly", declared={"queue": "reports"})
    page = admin_client.get(change_url(row)).content.decode()
    assert "Declared in code with @periodic" in page
    assert 'name="name"' not in page  # read-only: renamed, the next sync would delete it


def test_pause_and_resume(admin_client):
    first, second = schedule("a"), schedule("b", every_ms=10_000)
    stale = api.now_ms() - 86_400_000
    Schedule.objects.filter(pk=second.pk).update(next_tick_at=stale)
    response = admin_client.post(
        CHANGELIST, {"action": "pause", ACTION_CHECKBOX_NAME: [first.pk, second.pk]}, follow=True
    )
    assert "Paused 2 schedules." in response.content.decode()
    assert not Schedule.objects.filter(enabled=True).exists()
    assert "paused" in admin_client.get(CHANGELIST).content.decode()

    before = api.now_ms()
    response = admin_client.post(
        CHANGELIST, {"action": "resume", ACTION_CHECKBOX_NAME: [second.pk]}, follow=True
    )
    assert "Resumed 1 schedule." in response.content.decode()
    second.refresh_from_db()
    # Ticks missed while paused are skipped: the next tick is after now.
    assert second.enabled and second.next_tick_at > before


def test_resume_refuses_a_schedule_whose_timing_cannot_be_computed(admin_client):
    row = schedule("broken", enabled=False)
    Schedule.objects.filter(pk=row.pk).update(timezone="Mars/Olympus_Mons")
    response = admin_client.post(
        CHANGELIST, {"action": "resume", ACTION_CHECKBOX_NAME: [row.pk]}, follow=True
    )
    assert "fix its timing first" in response.content.decode()
    row.refresh_from_db()
    assert not row.enabled


def test_a_viewer_sees_no_action_and_cannot_change(make_client):
    row = schedule("nightly")
    viewer = make_client("schedule-viewer", ["view_schedule"])
    page = viewer.get(CHANGELIST)
    assert page.status_code == 200 and 'name="action"' not in page.content.decode()
    response = viewer.post(CHANGELIST, {"action": "pause", ACTION_CHECKBOX_NAME: [row.pk]})
    row.refresh_from_db()
    assert row.enabled
    assert response.status_code in (200, 302, 403)
    assert viewer.post(change_url(row), form_data(name="nightly")).status_code == 403
    assert viewer.post(ADD, form_data()).status_code == 403
    assert Schedule.objects.count() == 1


def test_an_editor_without_add_permission_cannot_add(make_client):
    editor = make_client("schedule-editor", ["view_schedule", "change_schedule"])
    assert editor.post(ADD, form_data()).status_code == 403
    assert editor.get(CHANGELIST).status_code == 200
    assert not Schedule.objects.exists()


def test_the_next_tick_shown_is_the_stored_one(admin_client):
    row = schedule("soon")
    shown = datetime.fromtimestamp(row.next_tick_at / 1000, UTC) + timedelta(0)
    page = admin_client.get(change_url(row)).content.decode()
    assert str(shown.year) in page


def test_saving_a_parked_schedule_gives_it_a_next_tick_and_clears_its_error(admin_client):
    """A check parked it (no next tick, the reason in last_error): saving it again, even
    unchanged, is how an operator retries it."""
    row = schedule("parked", cron="0 * 28 * *", timezone="America/Nuuk")
    reason = "cron could not be computed in America/Nuuk: the walk back ... found no tick within 10000 steps"
    Schedule.objects.filter(pk=row.pk).update(next_tick_at=None, last_error=reason)
    assert reason[:60] in admin_client.get(CHANGELIST).content.decode()
    data = form_data(
        name="parked", cron="0 * 28 * *", timezone="America/Nuuk", channel="default", payload="{}"
    )
    before = api.now_ms()
    response = admin_client.post(change_url(row), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    row.refresh_from_db()
    assert row.last_error is None and row.next_tick_at > before


@pytest.mark.parametrize(
    ("payload", "text"),
    [
        ("[" * 990 + "]" * 990, "more than the 100"),
        ('{"a": ' * 995 + "1" + "}" * 995, "more than the 100"),
        ("[" * 150 + "]" * 150, "more than the 100"),
        ('"\\ud800"', "valid Unicode"),
        ('{"note": "a\\udfffb"}', "valid Unicode"),
        ('{"x": "\\u0000"}', "NUL"),
        ("[1e999]", "JSON"),
    ],
    ids=["list-990-deep", "object-995-deep", "150-deep", "lone-surrogate", "lone-surrogate-inside", "nul",
         "infinity"],
)  # fmt: skip
def test_a_payload_the_queue_would_refuse_is_a_form_error(admin_client, payload, text):
    """Too deep for Python's json (990 levels), deeper than the bound, or holding what
    PostgreSQL refuses: an error on the payload field, the text shown as typed, nothing saved."""
    response = admin_client.post(ADD, form_data(payload=payload))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "payload" in errors and text in str(errors["payload"]), errors
    assert escape(payload) in response.content.decode()  # shown back as typed
    assert not Schedule.objects.exists()
    row = schedule("existing", payload={"v": 1})
    response = admin_client.post(change_url(row), form_data(name="existing", payload=payload))
    assert response.status_code == 200
    assert "payload" in response.context["adminform"].form.errors
    row.refresh_from_db()
    assert row.payload == {"v": 1}
