"""Subscriptions in the admin: ops add and remove consumer groups without a deploy; bad
names get the form's error and nothing is saved; unrouted counters are read only."""

from __future__ import annotations

from django_lonnymq import publish
from django_lonnymq.models import Subscription, Unrouted

ADD = "/admin/django_lonnymq/subscription/add/"
SUBSCRIPTION_PERMS = ["add_subscription", "change_subscription", "delete_subscription", "view_subscription"]


def test_ops_add_a_consumer_group_and_publishing_reaches_it(make_client):
    client = make_client("ops", SUBSCRIPTION_PERMS)
    response = client.post(ADD, {"topic": "orders.created", "queue": "billing"})
    assert response.status_code == 302, response.content[:2000]
    assert list(Subscription.objects.values_list("topic", "queue")) == [("orders.created", "billing")]
    assert len(publish("orders.created", {"order": 1})) == 1
    page = client.get("/admin/django_lonnymq/subscription/").content.decode()
    assert "orders.created" in page and "billing" in page


def test_bad_names_and_duplicates_are_form_errors(make_client):
    client = make_client("ops", SUBSCRIPTION_PERMS)
    Subscription.objects.create(topic="orders.created", queue="billing")
    for data, text in [
        ({"topic": "orders.created", "queue": "q" * 101}, "at most 100 characters"),
        ({"topic": "   ", "queue": "billing"}, "This field is required"),
        ({"topic": "orders.created", "queue": "billing"}, "already exists"),
    ]:
        response = client.post(ADD, data)
        assert response.status_code == 200
        assert text in response.content.decode()
    assert Subscription.objects.count() == 1


def test_a_viewer_cannot_add_and_unrouted_counters_are_read_only(make_client, viewer_client):
    publish("nobody.listens", {})
    viewer = make_client("viewer2", ["view_subscription", "view_unrouted"])
    assert viewer.post(ADD, {"topic": "t", "queue": "q"}).status_code == 403
    assert not Subscription.objects.exists()
    page = viewer.get("/admin/django_lonnymq/unrouted/")
    assert page.status_code == 200 and "nobody.listens" in page.content.decode()
    assert viewer.get("/admin/django_lonnymq/unrouted/add/").status_code == 403
    assert Unrouted.objects.get(topic="nobody.listens").events == 1
