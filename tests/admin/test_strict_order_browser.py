"""Strict order in a real headless browser: an operator makes a channel ordered on its page
(a cap other than 1 is refused by the form), sees it blocked by a dead message in the channel
list, with why, and skips the dead message with the list's action; a view-only user has no
such action."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User

from django_lonnymq import api, enqueue_many
from django_lonnymq.models import Channel
from tests.harness.helpers import dequeue, scalar

from .conftest import admin_page

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "o_admin"


def test_an_operator_orders_a_channel_sees_it_blocked_and_skips_the_dead_message(live_server, browser) -> None:  # type: ignore[no-untyped-def]
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    viewer = User.objects.create_user("viewer", "v@example.com", "correct horse battery", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_channel"))
    first, second = enqueue_many(QUEUE, [{"n": 1}, {"n": 2}], channel="acme", max_attempts=1)
    channel = Channel.objects.get(queue=QUEUE, name="acme")

    page = admin_page(browser, live_server.url, width=1366, height=900)
    change_url = f"{live_server.url}/admin/django_lonnymq/channel/{channel.pk}/change/"
    page.goto(change_url)
    page.check("#id_ordered")
    page.fill("#id_max_concurrency", "3")
    page.click("input[name='_save']")
    assert "max concurrency 1" in page.locator(".errorlist").inner_text()
    assert not Channel.objects.get(pk=channel.pk).ordered  # nothing written
    page.fill("#id_max_concurrency", "1")
    page.click("input[name='_save']")
    page.wait_for_selector(".messagelist")
    assert Channel.objects.get(pk=channel.pk).ordered

    [leased] = dequeue(QUEUE, batch=5)
    scalar("SELECT lonnymq_fail_v2(%s, %s, 'card declined', NULL, 'failed', 0, 0, 50)",
           [leased["id"], str(leased["lease_token"])])  # fmt: skip
    page.goto(f"{live_server.url}/admin/django_lonnymq/channel/?queue={QUEUE}")
    row = page.locator("#result_list tbody tr", has_text="acme")
    assert f"blocked by dead message {first}" in row.inner_text()
    assert "requeue or skip it" in row.inner_text()
    row.locator("input.action-select").check()
    page.select_option("select[name='action']", "skip_blocking")
    page.click("button[name='index']")
    assert f"message {first}" in page.locator(".messagelist").inner_text()
    assert api.blocked_channels(QUEUE) == []
    assert [m["id"] for m in dequeue(QUEUE, batch=5)] == [second]

    viewer_page = admin_page(browser, live_server.url, width=1366, height=900, user="viewer")
    viewer_page.goto(f"{live_server.url}/admin/django_lonnymq/channel/?queue={QUEUE}")
    assert viewer_page.locator("select[name='action']").count() == 0 or "skip_blocking" not in (
        viewer_page.locator("select[name='action']").inner_html()
    )
