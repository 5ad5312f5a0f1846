"""The admin with queues on two databases (``LONNYMQ_QUEUE_DATABASES``): a list shows one
database at a time (``?database=``, a filter), its detail pages and actions run there, and
forms that name a queue write on the queue's database."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.test import Client

from django_lonnymq import api, enqueue
from django_lonnymq.models import Channel, Message, QueueConfig

BOTH = ["default", "other"]
pytestmark = pytest.mark.django_db(databases=BOTH)
MESSAGES = "/admin/django_lonnymq/message/"
CHANNELS = "/admin/django_lonnymq/channel/"
LIMITS = "/admin/django_lonnymq/queueconfig/"


@pytest.fixture(autouse=True)
def mapped(settings):
    settings.LONNYMQ_QUEUE_DATABASES = {"t_noop": "other"}


def listed(client: Client, url: str) -> list[int]:
    response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return sorted(obj.pk for obj in response.context["cl"].result_list)


def test_the_message_list_shows_one_database_at_a_time(admin_client: Client):
    here = enqueue("t_admin", {"n": 1})
    there = enqueue("t_noop", {"n": 2})
    assert listed(admin_client, MESSAGES + "?queue=t_admin") == [here]
    assert listed(admin_client, MESSAGES + "?queue=t_noop") == []
    assert listed(admin_client, MESSAGES + "?database=other") == [there]
    assert listed(admin_client, MESSAGES + "?database=other&queue=t_noop") == [there]
    page = admin_client.get(MESSAGES).content.decode()
    assert "By database" in page and "?database=other" in page
    # The detail page, reached from the list (its filters preserved), reads the other database.
    preserved = urlencode({"_changelist_filters": "database=other"})
    detail = admin_client.get(f"{MESSAGES}{there}/change/?{preserved}")
    assert detail.status_code == 200 and detail.context["original"]._state.db == "other"


def test_an_action_runs_on_the_chosen_database(admin_client: Client):
    there = enqueue("t_noop", {"n": 1})
    here = enqueue("t_admin", {"n": 2})
    response = admin_client.post(
        MESSAGES + "?database=other", {"action": "cancel", "_selected_action": [there]}, follow=True
    )
    assert response.status_code == 200
    assert not Message.objects.using("other").filter(pk=there).exists()
    assert Message.objects.using("default").filter(pk=here).exists()


def test_channel_and_queue_limit_pages_follow_the_mapping(admin_client: Client):
    api.configure_channel("t_noop", "acme", max_concurrency=3)
    api.configure_channel("t_admin", "acme", max_concurrency=4)
    acme = Channel.objects.using("other").get(queue="t_noop", name="acme")
    assert listed(admin_client, CHANNELS + "?database=other") == [acme.pk]
    # Adding a channel of a mapped queue writes it on that queue's database.
    response = admin_client.post(
        CHANNELS + "add/",
        {"queue": "t_noop", "name": "globex", "max_concurrency": "2", "release_interval_ms": "0", "weight": "1",
         "rate": ""},
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Channel.objects.using("other").get(queue="t_noop", name="globex").max_concurrency == 2
    assert not Channel.objects.using("default").filter(name="globex").exists()
    # Pausing queues from the queue-limits list runs on the chosen database.
    api.configure_queue("t_noop", max_concurrency=5)
    admin_client.post(LIMITS + "?database=other", {"action": "pause_queues", "_selected_action": ["t_noop"]})
    assert QueueConfig.objects.using("other").get(queue="t_noop").paused


def test_the_dashboard_shows_the_chosen_database(admin_client: Client):
    enqueue("t_admin", {"n": 1})
    enqueue("t_noop", {"n": 2})
    default = admin_client.get(CHANNELS + "dashboard/")
    other = admin_client.get(CHANNELS + "dashboard/?database=other")
    shown = {row["sample"].queue for row in default.context["queues"]}
    assert "t_admin" in shown and "t_noop" not in shown
    assert [row["sample"].queue for row in other.context["queues"]] == ["t_noop"]
    assert 'id="lq-databases"' in other.content.decode()
    # Pausing from the dashboard reaches the queue's database, and comes back to it.
    response = admin_client.post(CHANNELS + "dashboard/", {"queue": "t_noop", "action": "pause"})
    assert response.status_code == 302 and "database=other" in response["Location"]
    assert QueueConfig.objects.using("other").get(queue="t_noop").paused


def test_with_one_database_no_filter_shows(admin_client: Client, settings):
    settings.LONNYMQ_QUEUE_DATABASES = {}
    enqueue("t_admin", {"n": 1})
    page = admin_client.get(MESSAGES).content.decode()
    assert "By database" not in page
    assert 'id="lq-databases"' not in admin_client.get(CHANNELS + "dashboard/").content.decode()


def test_subscriptions_schedules_and_workers_pages_follow_the_mapping(admin_client: Client):
    from django_lonnymq.models import Schedule, Subscription

    response = admin_client.post(
        "/admin/django_lonnymq/subscription/add/", {"topic": "invoices.paid", "queue": "t_noop"}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    added = Subscription.objects.using("other").get(topic="invoices.paid")
    assert added.queue == "t_noop"
    assert not Subscription.objects.using("default").filter(topic="invoices.paid").exists()
    assert listed(admin_client, "/admin/django_lonnymq/subscription/?database=other") == [added.pk]
    assert listed(admin_client, "/admin/django_lonnymq/subscription/") == []
    response = admin_client.post(
        "/admin/django_lonnymq/schedule/add/",
        {"name": "md_nightly", "queue": "t_noop", "channel": "default", "every_seconds": "60", "timezone": "UTC",
         "payload": "null", "catch_up": "1", "enabled": "on"},
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Schedule.objects.using("other").filter(name="md_nightly").exists()
    assert not Schedule.objects.using("default").filter(name="md_nightly").exists()
    assert admin_client.get("/admin/django_lonnymq/worker/?database=other").status_code == 200
