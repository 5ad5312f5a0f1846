"""Pausing a whole queue in a real headless browser: the dashboard's Pause button pauses a
queue that has no limits row, the badge and header say so, and the queue-limits page's
action resumes it. Screenshot in ``test-output/`` (``paused_queue_dashboard.png``)."""

from __future__ import annotations

from django.contrib.auth.models import User

from django_lonnymq import alarms, api

from .conftest import admin_page
from .test_browser import OUTPUT

QUEUE = "exports"


def test_an_operator_pauses_a_queue_on_the_dashboard_and_resumes_it(  # type: ignore[no-untyped-def]
    live_server, browser
) -> None:
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    api.enqueue(QUEUE, {"n": 1}, channel="acme")
    api.enqueue("mail", {"n": 1}, channel="acme")

    OUTPUT.mkdir(exist_ok=True)
    page = admin_page(browser, live_server.url, width=1366, height=900)

    dashboard = f"{live_server.url}/admin/django_lonnymq/channel/dashboard/?queue={QUEUE}"
    page.goto(dashboard)
    assert page.locator(".lq-queue-paused-badge").count() == 0
    page.click(f"form:has(input[name='queue'][value='{QUEUE}']) input[value='Pause']")
    page.wait_for_selector("ul.messagelist li.success")
    assert alarms.paused_queues() == {QUEUE}
    assert "(paused)" in page.locator("h1").first.inner_text()
    assert page.locator("#lq-queue-paused").is_visible()
    badges = page.locator(".lq-queue-paused-badge")
    assert badges.count() == 1 and badges.first.is_visible()
    page.screenshot(path=str(OUTPUT / "paused_queue_dashboard.png"), full_page=True)

    # The queue-limits page lists it (paused, no limit); its action resumes it.
    page.goto(f"{live_server.url}/admin/django_lonnymq/queueconfig/")
    page.check(f"input[name='_selected_action'][value='{QUEUE}']")
    page.select_option("select[name='action']", "resume_queues")
    page.click("button[name='index']")
    page.wait_for_selector("ul.messagelist li.success")
    assert f"Resumed 1 queue: {QUEUE}." in page.locator("ul.messagelist").inner_text()
    assert alarms.paused_queues() == set()
