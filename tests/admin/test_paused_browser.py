"""The paused state in a real headless browser: ops pause a tenant from the channel list; its
messages then show as paused in the message list and on the dashboard, and the dashboard's
"oldest ready message" no longer counts them. Screenshots in ``test-output/``
(``paused_messages.png``, ``paused_dashboard.png``)."""

from __future__ import annotations

import re
from datetime import timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from django_lonnymq import api
from django_lonnymq.models import Channel

from .conftest import admin_page
from .test_browser import OUTPUT

QUEUE = "thumbnails"


def test_pausing_a_tenant_shows_its_messages_as_paused(live_server, browser) -> None:  # type: ignore[no-untyped-def]
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    an_hour_ago = timezone.now() - timedelta(hours=1)
    held = [api.enqueue(QUEUE, {"image": n}, channel="acme", run_at=an_hour_ago) for n in range(3)]
    api.enqueue(QUEUE, {"image": "fresh"}, channel="globex")
    acme = Channel.objects.get(queue=QUEUE, name="acme")

    OUTPUT.mkdir(exist_ok=True)
    page = admin_page(browser, live_server.url, width=1440, height=900)

    # Before: acme's hour-old messages are ready and the oldest ready has waited an hour.
    page.goto(f"{live_server.url}/admin/django_lonnymq/channel/dashboard/?queue={QUEUE}")
    assert re.search(r"\b1 h\b|\b59 min\b", page.locator("#lq-figures").inner_text())

    # Pause acme from the channel list.
    page.goto(f"{live_server.url}/admin/django_lonnymq/channel/?queue={QUEUE}")
    page.check(f"input[name='_selected_action'][value='{acme.pk}']")
    page.select_option("select[name='action']", "pause")
    page.click("button[name='index']")
    page.wait_for_selector("ul.messagelist li.success")
    acme.refresh_from_db()
    assert acme.paused

    # The message list: filter by the paused state; each row says paused.
    page.goto(f"{live_server.url}/admin/django_lonnymq/message/?state=paused")
    page.wait_for_selector("#result_list")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 3
    assert {int(r.locator("th.field-id, td.field-id").inner_text()) for r in rows.all()} == set(held)
    assert {r.locator("td.field-state_display").inner_text() for r in rows.all()} == {"paused"}
    page.screenshot(path=str(OUTPUT / "paused_messages.png"), full_page=True)
    page.goto(f"{live_server.url}/admin/django_lonnymq/message/?state=ready")
    assert page.locator("#result_list tbody tr").count() == 1

    # The dashboard: a paused tile with 3, ready 1, and the oldest ready is the fresh one.
    page.goto(f"{live_server.url}/admin/django_lonnymq/channel/dashboard/?queue={QUEUE}")
    assert page.locator("#lq-paused .lq-value").inner_text() == "3"
    assert page.locator("#lq-paused .lq-label").inner_text() == "paused (1 channel)"
    figures = page.locator("#lq-figures").inner_text()
    oldest = re.search(r"([^\n]+)\noldest ready message has waited", figures)
    assert oldest is not None and re.fullmatch(r"\d+ (ms|s)", oldest[1]), figures
    page.screenshot(path=str(OUTPUT / "paused_dashboard.png"), full_page=True)

    assert (OUTPUT / "paused_dashboard.png").stat().st_size > 10_000
