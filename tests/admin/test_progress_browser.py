"""Progress in a real headless browser: a running message's last report on its page (bar,
figures, note) and in the dashboard's list of running messages; a finished message's page
still shows its last report; a report without a total shows what was done."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from django_lonnymq import api, enqueue, statements
from tests.harness.helpers import dequeue

from .conftest import admin_page

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "p_admin"


def test_an_operator_sees_how_far_a_running_message_got(live_server, browser) -> None:  # type: ignore[no-untyped-def]
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    running = enqueue(QUEUE, {"export": 1}, channel="tenant-acme")
    [leased] = dequeue(QUEUE, batch=1)
    assert leased["id"] == running
    gone = enqueue(QUEUE, {"export": 2}, channel="tenant-globex")
    statements.progress(
        ids=[running, gone], queues=[QUEUE, QUEUE], channels=["tenant-acme", "tenant-globex"],
        done=[1200.0, 7.0], totals=[4800.0, None], notes=["rows of March", ""],
    )  # fmt: skip
    api.cancel([gone])  # a waiting message: deleted, its report kept

    page = admin_page(browser, live_server.url, width=1366, height=900)
    page.goto(f"{live_server.url}/admin/django_lonnymq/message/{running}/change/")
    box = page.locator("#lq-progress")
    assert "1200 of 4800 (25%)" in box.inner_text() and "rows of March" in box.inner_text()
    assert box.locator("progress").get_attribute("value") == "1200.0"

    page.goto(f"{live_server.url}/admin/django_lonnymq/channel/dashboard/?queue={QUEUE}")
    rows = page.locator("#lq-progress tr.lq-progress-row")
    assert rows.count() == 1  # the running message only
    assert "tenant-acme" in rows.first.inner_text() and "25%" in rows.first.inner_text()
    rows.first.locator("a").click()
    page.wait_for_url(f"**/message/{running}/change/")

    # A message without a total: what was done, and that no total was given.
    third = enqueue(QUEUE, {"export": 3})
    statements.progress(
        ids=[third], queues=[QUEUE], channels=["default"], done=[7.0], totals=[None], notes=[""],
    )  # fmt: skip
    page.goto(f"{live_server.url}/admin/django_lonnymq/message/{third}/change/")
    assert "7 done (no total given)" in page.locator("#lq-progress").inner_text()
