"""Weights, rates and queue-wide limits in the admin: human units, validation, and every write
through the API (configure_channel / configure_queue)."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.test import Client
from django.urls import reverse

from django_lonnymq import api
from django_lonnymq.models import Channel, QueueConfig
from django_lonnymq.rates import Rate

from .conftest import QUEUE

pytestmark = pytest.mark.django_db

QUEUE_LIST = reverse("admin:django_lonnymq_queueconfig_changelist")
QUEUE_ADD = reverse("admin:django_lonnymq_queueconfig_add")


def channel_change(ch: Channel) -> str:
    return reverse("admin:django_lonnymq_channel_change", args=[ch.pk])


def channel_post(ch: Channel, **values: str) -> dict[str, str]:
    data = {
        "max_concurrency": "" if ch.max_concurrency is None else str(ch.max_concurrency),
        "release_interval_ms": str(ch.release_interval_ms),
        "weight": str(ch.weight),
        "rate": str(ch.rate) if ch.rate else "",
    }
    data.update(values)
    return data


def test_the_channel_page_sets_weight_and_rate_in_human_units(admin_client: Client) -> None:
    ch = Channel.objects.get(pk=api.configure_channel(QUEUE, "premium"))
    with mock.patch.object(api, "configure_channel", wraps=api.configure_channel) as configure:
        response = admin_client.post(
            channel_change(ch), channel_post(ch, weight="3", rate="100 / min, burst 20")
        )
    assert response.status_code == 302, response.content.decode()[:3000]
    kwargs = configure.call_args.kwargs
    assert kwargs["weight"] == 3 and kwargs["rate"] == Rate(100, timedelta(minutes=1), 20)
    assert "max_concurrency" not in kwargs  # only what changed
    ch.refresh_from_db()
    assert (ch.weight, ch.rate_count, ch.rate_period_ms, ch.rate_burst) == (3, 100, 60_000, 20)
    page = admin_client.get(channel_change(ch)).content.decode()
    assert 'value="100 / min, burst 20"' in page
    # The list leaves the rate to this page (it fits 1366 px); the dashboard's tenants view shows it.
    tenants = admin_client.get(reverse("admin:django_lonnymq_channel_dashboard"), {"queue": QUEUE})
    assert "100 / min, burst 20" in tenants.content.decode()

    # Clearing the rate removes the bucket.
    ch.refresh_from_db()
    response = admin_client.post(channel_change(ch), channel_post(ch, rate=""))
    assert response.status_code == 302
    ch.refresh_from_db()
    assert ch.rate is None and ch.weight == 3


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"weight": "0"}, "Weight must be between 1 and 1000"),
        ({"weight": "1001"}, "Weight must be between 1 and 1000"),
        ({"rate": "0 / min"}, "rate.count must be between 1 and 1000000"),
        ({"rate": "5 / min, burst 0"}, "rate.burst must be between 1 and 1000000"),
        ({"rate": "5 / 0 s"}, "rate.period must be at least 1 ms"),
        ({"rate": "5 / 400 d"}, "rate.period must be at most 366 days"),
        ({"rate": "often"}, "rate must read"),
    ],
)
def test_bad_weights_and_rates_are_refused_on_the_channel_page(admin_client: Client, values, message) -> None:
    ch = Channel.objects.get(pk=api.configure_channel(QUEUE, "acme"))
    with mock.patch.object(api, "configure_channel", wraps=api.configure_channel) as configure:
        response = admin_client.post(channel_change(ch), channel_post(ch, **values))
    assert response.status_code == 200
    assert message in response.content.decode()
    configure.assert_not_called()
    ch.refresh_from_db()
    assert (ch.weight, ch.rate) == (1, None)


def test_queue_limits_are_added_changed_and_removed_through_configure_queue(admin_client: Client) -> None:
    with mock.patch.object(api, "configure_queue", wraps=api.configure_queue) as configure:
        response = admin_client.post(
            QUEUE_ADD, {"queue": "vendor", "max_concurrency": "50", "rate": "100 / min, burst 20"}
        )
    assert response.status_code == 302, response.content.decode()[:3000]
    configure.assert_called_once()
    config = QueueConfig.objects.get(queue="vendor")
    assert (config.max_concurrency, config.rate) == (50, Rate(100, timedelta(minutes=1), 20))
    listing = admin_client.get(QUEUE_LIST).content.decode()
    assert "100 / min, burst 20" in listing and "0 / 50" in listing

    change = reverse("admin:django_lonnymq_queueconfig_change", args=["vendor"])
    with mock.patch.object(api, "configure_queue", wraps=api.configure_queue) as configure:
        response = admin_client.post(change, {"max_concurrency": "", "rate": "100 / min, burst 20"})
    assert response.status_code == 302, response.content.decode()[:3000]
    assert configure.call_args.kwargs == {"using": "default", "max_concurrency": None}
    config.refresh_from_db()
    assert (config.max_concurrency, config.rate_count) == (None, 100)

    delete = reverse("admin:django_lonnymq_queueconfig_delete", args=["vendor"])
    response = admin_client.post(delete, {"post": "yes"})
    assert response.status_code == 302
    assert not QueueConfig.objects.filter(queue="vendor").exists()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_concurrency": "0"}, "Max concurrency must be at least 1"),
        ({"max_concurrency": "", "rate": ""}, "Set a concurrency cap or a rate"),
        ({"max_concurrency": "3", "rate": "3 per fortnight"}, "rate must read"),
        ({"max_concurrency": "3", "rate": "10 / s, burst 0"}, "rate.burst must be between"),
    ],
)
def test_bad_queue_limits_are_refused_and_nothing_is_written(admin_client: Client, values, message) -> None:
    with mock.patch.object(api, "configure_queue", wraps=api.configure_queue) as configure:
        response = admin_client.post(QUEUE_ADD, {"queue": "vendor", **values})
    assert response.status_code == 200
    assert message in response.content.decode()
    configure.assert_not_called()
    assert not QueueConfig.objects.exists()


def test_a_view_only_user_cannot_change_queue_limits(client: Client, django_user_model) -> None:
    from django.contrib.auth.models import Permission

    api.configure_queue("vendor", max_concurrency=5)
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_queueconfig"))
    client.force_login(user)
    change = reverse("admin:django_lonnymq_queueconfig_change", args=["vendor"])
    assert client.get(change).status_code == 200
    response = client.post(change, {"max_concurrency": "1"})
    assert response.status_code == 403
    assert QueueConfig.objects.get(queue="vendor").max_concurrency == 5


# A rate whose period overflows a timedelta (10**90 days): a form error, not a server error.
HUGE_PERIOD = "1 / " + "9" * 90 + " d"


def test_a_huge_rate_period_is_a_form_error_on_the_channel_page(admin_client: Client) -> None:
    ch = Channel.objects.get(pk=api.configure_channel(QUEUE, "acme"))
    with mock.patch.object(api, "configure_channel", wraps=api.configure_channel) as configure:
        response = admin_client.post(channel_change(ch), channel_post(ch, rate=HUGE_PERIOD))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "rate.period must be at most 366 days" in str(errors["rate"])
    configure.assert_not_called()
    ch.refresh_from_db()
    assert ch.rate is None


def test_a_huge_rate_period_is_a_form_error_on_the_queue_limits_page(admin_client: Client) -> None:
    with mock.patch.object(api, "configure_queue", wraps=api.configure_queue) as configure:
        response = admin_client.post(
            QUEUE_ADD, {"queue": "vendor", "max_concurrency": "3", "rate": HUGE_PERIOD}
        )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "rate.period must be at most 366 days" in str(errors["rate"])
    configure.assert_not_called()
    assert not QueueConfig.objects.exists()
