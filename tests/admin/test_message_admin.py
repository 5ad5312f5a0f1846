"""The Message admin (read-only list and detail, filters, run now, cancel) and the
dead-letter admin (requeue, purge), with the counts that never scan a large table."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_lonnymq import api
from django_lonnymq.admin import common as admin_common
from django_lonnymq.models import Channel, DeadMessage, Message

from .conftest import QUEUE, dequeue, make_dead

pytestmark = pytest.mark.django_db

MESSAGES = reverse("admin:django_lonnymq_message_changelist")
DEAD = reverse("admin:django_lonnymq_deadmessage_changelist")


def ids_listed(response) -> list[int]:  # type: ignore[no-untyped-def]
    return [row.pk for row in response.context["cl"].result_list]


@pytest.fixture
def states() -> dict[str, int]:
    """One message in each state: ready, scheduled, in flight (and another queue's)."""
    leased = api.enqueue(QUEUE, {"n": "leased"}, channel="acme")
    assert [row[0] for row in dequeue()] == [leased]
    return {
        "in_flight": leased,
        "ready": api.enqueue(QUEUE, {"n": "ready"}, channel="acme"),
        "scheduled": api.enqueue(QUEUE, {"n": "later"}, channel="globex", delay=timedelta(hours=2)),
        "other_queue": api.enqueue("t_admin_other", {"n": "x"}, channel="acme"),
    }


def test_list_shows_lease_holder_expiry_and_attempts(admin_client: Client, states: dict[str, int]) -> None:
    response = admin_client.get(MESSAGES)
    assert response.status_code == 200
    assert set(ids_listed(response)) == set(states.values())
    html = response.content.decode()
    assert "test-worker@host:1" in html  # leased_by
    assert "1 / 5" in html  # attempts of the leased message
    assert "in flight" in html and "scheduled" in html


@pytest.mark.parametrize("state", ["ready", "scheduled", "in_flight"])
def test_state_filter(admin_client: Client, states: dict[str, int], state: str) -> None:
    response = admin_client.get(MESSAGES, {"state": state, "queue": QUEUE})
    assert ids_listed(response) == [states[state]]


def test_queue_and_channel_filters(admin_client: Client, states: dict[str, int]) -> None:
    assert set(ids_listed(admin_client.get(MESSAGES, {"queue": "t_admin_other"}))) == {states["other_queue"]}
    globex = Channel.objects.get(queue=QUEUE, name="globex")
    assert ids_listed(admin_client.get(MESSAGES, {"channel": globex.pk})) == [states["scheduled"]]
    # The channel filter lists the chosen queue's channels.
    html = admin_client.get(MESSAGES, {"queue": QUEUE}).content.decode()
    assert f"channel={globex.pk}" in html


def test_search_by_id(admin_client: Client, states: dict[str, int]) -> None:
    assert ids_listed(admin_client.get(MESSAGES, {"q": str(states["ready"])})) == [states["ready"]]
    assert ids_listed(admin_client.get(MESSAGES, {"q": "not-an-id"})) == []


def test_detail_is_read_only_for_everyone(admin_client: Client, states: dict[str, int]) -> None:
    url = reverse("admin:django_lonnymq_message_change", args=[states["in_flight"]])
    response = admin_client.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    assert "test-worker@host:1" in html and "&quot;leased&quot;" in html
    assert 'name="_save"' not in html
    assert admin_client.post(url, {"attempts": "0"}).status_code == 403
    assert admin_client.get(reverse("admin:django_lonnymq_message_add")).status_code == 403
    assert (
        admin_client.get(reverse("admin:django_lonnymq_message_delete", args=[states["ready"]])).status_code
        == 403
    )


def test_run_now_makes_a_scheduled_message_ready(admin_client: Client, states: dict[str, int]) -> None:
    response = admin_client.post(
        MESSAGES,
        {"action": "run_now", ACTION_CHECKBOX_NAME: [states["scheduled"], states["in_flight"]]},
        follow=True,
    )
    assert "1 messages made ready now" in response.content.decode()
    assert Message.objects.get(pk=states["scheduled"]).state == "ready"
    assert Message.objects.get(pk=states["in_flight"]).state == "in_flight"


def test_cancel_deletes_waiting_messages_and_marks_running_ones(
    admin_client: Client, states: dict[str, int]
) -> None:
    response = admin_client.post(
        MESSAGES,
        {"action": "cancel", ACTION_CHECKBOX_NAME: [states["ready"], states["in_flight"]]},
        follow=True,
    )
    assert not Message.objects.filter(pk=states["ready"]).exists()
    running = Message.objects.get(pk=states["in_flight"])
    assert running.cancel_requested and running.lease_token is not None  # still its worker's
    assert "1 waiting messages cancelled; 1 running ones will be stopped" in response.content.decode()


def test_view_only_staff_cannot_run_now_or_cancel(viewer_client: Client, states: dict[str, int]) -> None:
    response = viewer_client.get(MESSAGES)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'value="run_now"' not in html and 'value="cancel"' not in html
    viewer_client.post(MESSAGES, {"action": "cancel", ACTION_CHECKBOX_NAME: [states["ready"]]})
    assert Message.objects.filter(pk=states["ready"]).exists()


def test_unfiltered_list_uses_the_planner_estimate_not_count(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_common, "COUNT_CAP", 5)
    api.enqueue_many(QUEUE, [{"n": n} for n in range(12)], channel="acme")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE lonnymq_message")

    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(MESSAGES)

    paginator = response.context["cl"].paginator
    assert paginator.count_is_estimate and paginator.count == 12
    assert "about 12 messages (estimate)" in response.content.decode()
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts == [], counts


def test_filtered_count_stops_at_the_cap(admin_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin_common, "COUNT_CAP", 5)
    api.enqueue_many(QUEUE, [{"n": n} for n in range(12)], channel="acme")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(MESSAGES, {"state": "ready"})
    paginator = response.context["cl"].paginator
    assert paginator.count_is_capped and paginator.count == 5
    assert "more than 5 messages" in response.content.decode()
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts and all("LIMIT 6" in sql for sql in counts), counts


# ---------------------------------------------------------------------------------------
# Dead letters
# ---------------------------------------------------------------------------------------


def test_dead_list_shows_error_attempts_reason(admin_client: Client) -> None:
    dead_id = make_dead(error="Traceback...\nValueError: bad pdf")
    response = admin_client.get(DEAD)
    assert ids_listed(response) == [dead_id]
    html = response.content.decode()
    assert "ValueError: bad pdf" in html and "1 / 1" in html and "failed" in html
    detail = admin_client.get(reverse("admin:django_lonnymq_deadmessage_change", args=[dead_id]))
    assert detail.status_code == 200 and 'name="_save"' not in detail.content.decode()
    assert admin_client.get(reverse("admin:django_lonnymq_deadmessage_add")).status_code == 403


def test_requeue_resets_attempts(admin_client: Client) -> None:
    dead_id = make_dead()
    response = admin_client.post(DEAD, {"action": "requeue", ACTION_CHECKBOX_NAME: [dead_id]}, follow=True)
    assert "Requeued 1 dead message," in response.content.decode()
    assert not DeadMessage.objects.filter(pk=dead_id).exists()
    message = Message.objects.get(pk=dead_id)
    assert (message.state, message.attempts) == ("ready", 0)
    assert [row[0] for row in dequeue()] == [dead_id]  # and it is released again


def test_requeue_keeping_attempts_gives_one_more_try(admin_client: Client) -> None:
    dead_id = make_dead()
    admin_client.post(DEAD, {"action": "requeue_keep_attempts", ACTION_CHECKBOX_NAME: [dead_id]})
    message = Message.objects.get(pk=dead_id)
    assert (message.attempts, message.max_attempts) == (1, 2)


def test_purge_dead(admin_client: Client) -> None:
    keep, gone = make_dead(channel="a"), make_dead(channel="b")
    admin_client.post(DEAD, {"action": "purge", ACTION_CHECKBOX_NAME: [gone]})
    assert list(DeadMessage.objects.values_list("id", flat=True)) == [keep]


def test_dead_filters(admin_client: Client) -> None:
    a, b = make_dead(channel="a"), make_dead(channel="b")
    assert ids_listed(admin_client.get(DEAD, {"queue": QUEUE, "channel_name": "b"})) == [b]
    assert set(ids_listed(admin_client.get(DEAD, {"reason": "failed"}))) == {a, b}


def test_view_only_staff_cannot_requeue_or_purge(viewer_client: Client) -> None:
    dead_id = make_dead()
    html = viewer_client.get(DEAD).content.decode()
    assert 'value="requeue"' not in html and 'value="purge"' not in html
    viewer_client.post(DEAD, {"action": "requeue", ACTION_CHECKBOX_NAME: [dead_id]})
    viewer_client.post(DEAD, {"action": "purge", ACTION_CHECKBOX_NAME: [dead_id]})
    assert DeadMessage.objects.filter(pk=dead_id).exists()


def test_requeue_needs_change_purge_needs_delete(make_client: Callable[..., Client]) -> None:
    dead_id = make_dead()
    requeuer = make_client("requeuer", ["view_deadmessage", "change_deadmessage"])
    html = requeuer.get(DEAD).content.decode()
    assert 'value="requeue"' in html and 'value="purge"' not in html
    requeuer.post(DEAD, {"action": "purge", ACTION_CHECKBOX_NAME: [dead_id]})
    assert DeadMessage.objects.filter(pk=dead_id).exists()
    requeuer.post(DEAD, {"action": "requeue", ACTION_CHECKBOX_NAME: [dead_id]})
    assert Message.objects.filter(pk=dead_id).exists()


def test_staff_without_permissions_gets_403(make_client: Callable[..., Client]) -> None:
    nobody = make_client("nobody", [])
    for url in (MESSAGES, DEAD, reverse("admin:django_lonnymq_channel_changelist")):
        assert nobody.get(url).status_code == 403
