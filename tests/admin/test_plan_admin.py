"""Plans in the admin: the plan pages write through api.configure_plan / delete_plan, and the
channel page shows where each limit in effect comes from (own, plan, default)."""

from __future__ import annotations

from unittest import mock

import pytest
from django.test import Client
from django.urls import reverse

from django_lonnymq import api
from django_lonnymq.models import Channel, Plan

from .conftest import QUEUE

pytestmark = pytest.mark.django_db


def test_adding_and_changing_a_plan_goes_through_configure_plan(admin_client: Client) -> None:
    with mock.patch.object(api, "configure_plan", wraps=api.configure_plan) as configure:
        response = admin_client.post(
            reverse("admin:django_lonnymq_plan_add"),
            {"name": "free", "weight": "1", "max_concurrency": "1", "release_interval_ms": "0",
             "rate": "10 / min, burst 10"},
        )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:3000]
    assert configure.call_args.args == ("free",)
    plan = Plan.objects.get(name="free")
    api.configure_channel(QUEUE, "acme", plan="free")
    with mock.patch.object(api, "configure_plan", wraps=api.configure_plan) as configure:
        response = admin_client.post(
            reverse("admin:django_lonnymq_plan_change", args=[plan.pk]),
            {"weight": "1", "max_concurrency": "2", "release_interval_ms": "0", "rate": "10 / min, burst 10"},
            follow=True,
        )
    assert configure.call_args.kwargs == {"using": "default", "max_concurrency": 2}  # only what changed
    assert "1 channel(s) of plan free took the new limits." in response.content.decode()
    assert Channel.objects.get(queue=QUEUE, name="acme").max_concurrency == 2
    listing = admin_client.get(reverse("admin:django_lonnymq_plan_changelist")).content.decode()
    assert "free" in listing and "10 / min, burst 10" in listing


def test_a_bad_plan_limit_is_refused_by_the_form(admin_client: Client) -> None:
    response = admin_client.post(
        reverse("admin:django_lonnymq_plan_add"),
        {"name": "bad", "weight": "1001", "max_concurrency": "0", "release_interval_ms": "0", "rate": "x"},
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert set(errors) == {"weight", "max_concurrency", "rate"}
    assert not Plan.objects.exists()


def test_a_plan_in_use_cannot_be_deleted_from_the_admin(admin_client: Client) -> None:
    api.configure_plan("free", max_concurrency=1)
    api.configure_channel(QUEUE, "acme", plan="free")
    plan = Plan.objects.get(name="free")
    page = admin_client.get(reverse("admin:django_lonnymq_plan_delete", args=[plan.pk])).content.decode()
    assert "1 channel(s) follow plan free" in page
    admin_client.post(reverse("admin:django_lonnymq_plan_delete", args=[plan.pk]), {"post": "yes"})
    assert Plan.objects.filter(name="free").exists()
    api.configure_channel(QUEUE, "acme", plan=None)
    admin_client.post(reverse("admin:django_lonnymq_plan_delete", args=[plan.pk]), {"post": "yes"})
    assert not Plan.objects.filter(name="free").exists()


def test_the_channel_page_shows_the_source_of_each_limit_and_sets_the_plan(admin_client: Client) -> None:
    api.configure_plan("premium", weight=3, max_concurrency=20)
    ch = Channel.objects.get(pk=api.configure_channel(QUEUE, "acme", release_interval=0.25))
    url = reverse("admin:django_lonnymq_channel_change", args=[ch.pk])
    post = {"plan": str(Plan.objects.get(name="premium").pk), "max_concurrency": "", "release_interval_ms": "250",
            "weight": "1", "rate": ""}  # fmt: skip
    with mock.patch.object(api, "configure_channel", wraps=api.configure_channel) as configure:
        response = admin_client.post(url, post)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert configure.call_args.kwargs["plan"] == "premium"
    assert "weight" not in configure.call_args.kwargs
    page = admin_client.get(url).content.decode()
    assert "lq-limit-sources" in page
    sources = {limit: source for limit, _, source in Channel.objects.get(pk=ch.pk).limit_sources()}
    assert sources == {"weight": "plan premium", "max_concurrency": "plan premium", "release_interval": "own",
                       "rate": "plan premium", "ordered": "plan premium"}  # fmt: skip
    assert page.count("plan premium") >= 3 and "<td>250 ms</td>" in page
    # Following the plan again for the interval.
    response = admin_client.post(
        url, {**post, "weight": "3", "max_concurrency": "20", "inherit": ["release_interval"]}
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    ch.refresh_from_db()
    assert (ch.release_interval_ms, ch.own_release_interval) == (0, False)
    # Editing a limit and letting it follow the plan at once is refused.
    response = admin_client.post(url, {**post, "weight": "5", "max_concurrency": "20", "inherit": ["weight"]})
    assert response.status_code == 200
    assert "not both: weight" in response.content.decode()
