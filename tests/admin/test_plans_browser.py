"""Plans in a real headless browser: an operator creates a plan, moves a channel onto it, and
the channel page shows which limits apply and where each comes from. Screenshots in
``test-output/`` (``plan_admin.png``, ``channel_limit_sources.png``) and, when
LONNYMQ_SHOTS names a folder, there too."""

from __future__ import annotations

import os
from pathlib import Path

from django.contrib.auth.models import User

from django_lonnymq import api
from django_lonnymq.models import Channel, Plan

from .conftest import admin_page
from .test_browser import OUTPUT


def test_an_operator_creates_a_plan_and_sees_where_a_channels_limits_come_from(  # type: ignore[no-untyped-def]
    live_server, browser
) -> None:

    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    channel_id = api.configure_channel("videos", "acme", max_concurrency=50)
    api.configure_plan("free", max_concurrency=1, rate="10 / min, burst 10")

    OUTPUT.mkdir(exist_ok=True)
    shots = [OUTPUT]
    if os.environ.get("LONNYMQ_SHOTS"):
        shots.append(Path(os.environ["LONNYMQ_SHOTS"]))
        shots[-1].mkdir(parents=True, exist_ok=True)
    page = admin_page(browser, live_server.url, width=1366, height=900)

    # A new plan through the add page.
    page.goto(f"{live_server.url}/admin/django_lonnymq/plan/add/")
    page.fill("#id_name", "premium")
    page.fill("#id_weight", "3")
    page.fill("#id_max_concurrency", "20")
    page.click("input[name='_save']")
    page.wait_for_selector("ul.messagelist li.success")
    plan = Plan.objects.get(name="premium")
    assert (plan.weight, plan.max_concurrency) == (3, 20)
    assert page.locator("#result_list").inner_text().count("premium") == 1
    for folder in shots:
        page.screenshot(path=str(folder / "plan_admin.png"), full_page=True)

    # The channel follows it; its own cap of 50 stays.
    page.goto(f"{live_server.url}/admin/django_lonnymq/channel/{channel_id}/change/")
    page.select_option("#id_plan", label="premium")
    page.click("input[name='_continue']")
    page.wait_for_selector("ul.messagelist li.success")
    table = page.locator("table.lq-limit-sources")
    assert table.is_visible()
    text = table.inner_text()
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in text.splitlines()[1:]}
    assert rows["weight"] == ["3", "plan premium"], text
    assert rows["max concurrency"] == ["50", "own"], text
    assert rows["rate"] == ["none", "plan premium"], text
    table.scroll_into_view_if_needed()
    for folder in shots:
        page.screenshot(path=str(folder / "channel_limit_sources.png"), full_page=True)
    channel = Channel.objects.get(pk=channel_id)
    assert (channel.weight, channel.max_concurrency, channel.plan_id) == (3, 50, plan.pk)
