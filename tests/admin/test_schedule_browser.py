"""Periodic schedules in a real headless browser (Debian's chromium, driven by Playwright): add a
tenant's schedule, see its next tick, pause it, edit its payload and timing, resume it.

Fails, never skips, when chromium or Playwright is missing (see test_browser.py). The
screenshot lands in ``test-output/schedules.png``.
"""

from __future__ import annotations

from django.contrib.auth.models import User

from django_lonnymq import api
from django_lonnymq.models import Schedule

from .conftest import admin_page
from .test_browser import OUTPUT


def test_ops_add_pause_edit_and_resume_a_schedule(live_server, browser) -> None:  # type: ignore[no-untyped-def]
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    Schedule.objects.create(
        name="app.handlers.nightly", queue="reports", cron="0 3 * * *", next_tick_at=api.now_ms() + 60_000,
        declared={"queue": "reports"},
    )  # fmt: skip
    OUTPUT.mkdir(exist_ok=True)

    page = admin_page(browser, live_server.url, width=1440, height=900)

    # Add a schedule that lives only in the database: tenant 42's weekday digest.
    page.goto(f"{live_server.url}/admin/django_lonnymq/schedule/add/")
    page.fill("#id_name", "tenant-42-digest")
    page.fill("#id_queue", "reports")
    page.fill("#id_channel", "tenant-42")
    page.fill("#id_cron", "30 6 * * 1-5")
    page.fill("#id_timezone", "Europe/Paris")
    page.fill("#id_payload", '{"tenant": 42}')
    page.click("input[name='_save']")
    page.wait_for_selector("ul.messagelist li.success")
    added = Schedule.objects.get(name="tenant-42-digest")
    assert added.declared is None and added.next_tick_at > api.now_ms()
    row = page.locator("#result_list tbody tr", has_text="tenant-42-digest")
    assert "30 6 * * 1-5 (Europe/Paris)" in row.inner_text()
    assert row.locator("td.field-next_tick").inner_text() not in ("", "-", "paused")
    assert "in the admin" in row.inner_text()
    page.screenshot(path=str(OUTPUT / "schedules.png"), full_page=True)

    # A bad edit is refused on its field, nothing written.
    page.goto(f"{live_server.url}/admin/django_lonnymq/schedule/{added.pk}/change/")
    page.fill("#id_timezone", "Mars/Olympus_Mons")
    page.click("input[name='_save']")
    page.wait_for_selector(".errorlist")
    assert "known IANA time zone" in page.locator(".errorlist").first.inner_text()
    assert Schedule.objects.get(pk=added.pk).timezone == "Europe/Paris"

    # Pause it from the list.
    page.goto(f"{live_server.url}/admin/django_lonnymq/schedule/")
    page.check(f"input[name='_selected_action'][value='{added.pk}']")
    page.select_option("select[name='action']", "pause")
    page.click("button[name='index']")
    page.wait_for_selector("ul.messagelist li.success")
    assert not Schedule.objects.get(pk=added.pk).enabled
    row = page.locator("#result_list tbody tr", has_text="tenant-42-digest")
    assert row.locator("td.field-next_tick").inner_text() == "paused"

    # Edit the payload and move to an interval while paused; it stays paused.
    page.goto(f"{live_server.url}/admin/django_lonnymq/schedule/{added.pk}/change/")
    page.fill("#id_payload", '{"tenant": 42, "format": "pdf"}')
    page.fill("#id_cron", "")
    page.fill("#id_every_seconds", "3600")
    page.click("input[name='_save']")
    page.wait_for_selector("ul.messagelist li.success")
    edited = Schedule.objects.get(pk=added.pk)
    assert edited.payload == {"tenant": 42, "format": "pdf"}
    assert edited.cron is None and edited.every_ms == 3_600_000 and not edited.enabled

    # Resume: the next tick is the first whole hour from now.
    page.check(f"input[name='_selected_action'][value='{added.pk}']")
    page.select_option("select[name='action']", "resume")
    page.click("button[name='index']")
    page.wait_for_selector("ul.messagelist li.success")
    resumed = Schedule.objects.get(pk=added.pk)
    assert resumed.enabled and resumed.next_tick_at % 3_600_000 == 0
    assert resumed.next_tick_at > api.now_ms()

    # A schedule declared in code shows where it comes from; its name is read-only.
    declared = Schedule.objects.get(name="app.handlers.nightly")
    page.goto(f"{live_server.url}/admin/django_lonnymq/schedule/{declared.pk}/change/")
    assert "Declared in code with @periodic" in page.content()
    assert page.locator("#id_name").count() == 0
