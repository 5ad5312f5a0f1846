"""Ordered plans in a real headless browser: an operator makes a plan ordered on its page (a
cap other than 1 is refused by the form, nothing written), the plan list says "ordered", and
the plan's channel is ordered at once; a channel whose own cap is not 1 is named when it stands
in the way."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from django_lonnymq import api
from django_lonnymq.models import Channel, Plan

from .conftest import admin_page

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "op_admin"


def test_an_operator_orders_a_plan_and_its_channels_follow(live_server, browser) -> None:  # type: ignore[no-untyped-def]
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    api.configure_plan("webhooks", max_concurrency=3)
    api.configure_channel(QUEUE, "acme", plan="webhooks")
    api.configure_channel(QUEUE, "big", plan="webhooks", max_concurrency=8)
    plan = Plan.objects.get(name="webhooks")

    page = admin_page(browser, live_server.url, width=1366, height=900)
    change_url = f"{live_server.url}/admin/django_lonnymq/plan/{plan.pk}/change/"
    page.goto(change_url)
    page.check("#id_ordered")
    page.click("input[name='_save']")
    assert "max concurrency 1" in page.locator(".errorlist").inner_text()
    assert not Plan.objects.get(pk=plan.pk).ordered  # nothing written
    page.fill("#id_max_concurrency", "1")
    page.click("input[name='_save']")
    assert "Channel op_admin/big sets its own max concurrency (8)" in page.locator(".errorlist").inner_text()
    assert not Plan.objects.get(pk=plan.pk).ordered

    api.configure_channel(QUEUE, "big", inherit=["max_concurrency"])
    page.goto(change_url)
    page.check("#id_ordered")
    page.fill("#id_max_concurrency", "1")
    page.click("input[name='_save']")
    page.wait_for_selector(".messagelist")
    assert "2 channel(s) of plan webhooks took the new limits" in page.locator(".messagelist").inner_text()
    assert Plan.objects.get(pk=plan.pk).ordered
    assert set(Channel.objects.filter(queue=QUEUE).values_list("ordered", "max_concurrency")) == {(True, 1)}

    page.goto(f"{live_server.url}/admin/django_lonnymq/plan/")
    header = page.locator("#result_list thead").inner_text()
    assert "ORDERED" in header.upper()
    row = page.locator("#result_list tbody tr", has_text="webhooks")
    assert row.locator("img[alt='True']").count() == 1
