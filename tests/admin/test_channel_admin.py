"""The Channel admin: counts, limits edited in the list (through configure_channel), add,
pause/resume, purge with confirmation, delete only when empty, permissions."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.test import Client
from django.urls import reverse

from django_lonnymq import api
from django_lonnymq.models import Channel, Message

from .conftest import QUEUE, dequeue

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:django_lonnymq_channel_changelist")


def change_url(channel: Channel) -> str:
    return reverse("admin:django_lonnymq_channel_change", args=[channel.pk])


def channel(name: str = "acme", **limits: object) -> Channel:
    return Channel.objects.get(pk=api.configure_channel(QUEUE, name, **limits))


def list_edit_post(ch: Channel, **values: object) -> dict[str, object]:
    data: dict[str, object] = {
        "form-TOTAL_FORMS": "1",
        "form-INITIAL_FORMS": "1",
        "form-MIN_NUM_FORMS": "0",
        "form-MAX_NUM_FORMS": "1000",
        "form-0-id": str(ch.pk),
        "form-0-max_concurrency": "" if ch.max_concurrency is None else str(ch.max_concurrency),
        "form-0-release_interval_ms": str(ch.release_interval_ms),
        "form-0-weight": str(ch.weight),
        "_save": "Save",
    }
    data.update({f"form-0-{key}": value for key, value in values.items()})
    return data


def test_changelist_shows_counts_from_one_query_per_page(admin_client: Client) -> None:
    ch = channel(max_concurrency=4)
    for n in range(3):
        api.enqueue(QUEUE, {"n": n}, channel="acme")
    for n in range(2):
        api.enqueue(QUEUE, {"later": n}, channel="acme", delay=timedelta(hours=1))
    assert len(dequeue(batch_size=1)) == 1
    channel("quiet")

    response = admin_client.get(CHANGELIST, {"queue": QUEUE})

    assert response.status_code == 200
    rows = {row.name: row.lq_counts for row in response.context["cl"].result_list}
    assert (rows["acme"].ready, rows["acme"].scheduled, rows["acme"].in_flight) == (2, 2, 1)
    assert (rows["quiet"].ready, rows["quiet"].scheduled, rows["quiet"].in_flight) == (0, 0, 0)
    html = response.content.decode()
    assert "1 / 4" in html  # in flight of a limited channel, against its limit
    assert 'name="form-0-max_concurrency"' in html  # editable for a superuser
    assert reverse("admin:django_lonnymq_channel_dashboard") in html
    assert ch.pk


def test_changing_a_limit_in_the_list_goes_through_configure_channel(admin_client: Client) -> None:
    ch = channel(max_concurrency=2, release_interval=0)
    spy = mock.patch.object(api, "configure_channel", wraps=api.configure_channel)

    with spy as configure:
        response = admin_client.post(
            CHANGELIST + f"?queue={QUEUE}", list_edit_post(ch, max_concurrency="7", release_interval_ms="250")
        )

    assert response.status_code == 302, response.content.decode()[:2000]
    configure.assert_called_once()
    args, kwargs = configure.call_args
    assert args == (QUEUE, "acme")
    assert kwargs["max_concurrency"] == 7
    assert kwargs["release_interval"] == timedelta(milliseconds=250)
    assert "paused" not in kwargs  # only changed limits are passed
    ch.refresh_from_db()
    assert (ch.max_concurrency, ch.release_interval_ms) == (7, 250)


def test_clearing_max_concurrency_means_unlimited(admin_client: Client) -> None:
    ch = channel(max_concurrency=3)
    response = admin_client.post(CHANGELIST, list_edit_post(ch, max_concurrency=""))
    assert response.status_code == 302
    ch.refresh_from_db()
    assert ch.max_concurrency is None


def test_an_invalid_limit_is_refused_and_nothing_changes(admin_client: Client) -> None:
    ch = channel(max_concurrency=3)
    with mock.patch.object(api, "configure_channel", wraps=api.configure_channel) as configure:
        response = admin_client.post(
            CHANGELIST, list_edit_post(ch, max_concurrency="0", release_interval_ms="-5")
        )
    assert response.status_code == 200
    assert response.context["cl"].formset.errors
    configure.assert_not_called()
    ch.refresh_from_db()
    assert ch.max_concurrency == 3


# bounds.MAX_INTERVAL: what configure_channel and the schema accept.
DAYS_366_MS = 366 * 86_400_000


@pytest.mark.parametrize("too_long", [DAYS_366_MS + 1, 10**15])
def test_a_release_interval_beyond_366_days_is_refused(admin_client: Client, too_long: int) -> None:
    ch = channel()
    response = admin_client.post(CHANGELIST, list_edit_post(ch, release_interval_ms=str(too_long)))
    assert response.status_code == 200
    assert "at most 366 days" in str(response.context["cl"].formset.errors)
    ch.refresh_from_db()
    assert ch.release_interval_ms == 0


def test_a_release_interval_of_366_days_is_accepted_as_the_api_accepts_it(admin_client: Client) -> None:
    ch = channel()
    data = {"max_concurrency": "", "release_interval_ms": str(DAYS_366_MS), "weight": "1", "rate": ""}
    with mock.patch.object(api, "configure_channel", wraps=api.configure_channel) as configure:
        response = admin_client.post(change_url(ch), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert configure.call_args.kwargs["release_interval"] == timedelta(days=366)
    ch.refresh_from_db()
    assert ch.release_interval_ms == DAYS_366_MS
    # In the list too.
    other = channel("other")
    response = admin_client.post(CHANGELIST, list_edit_post(other, release_interval_ms=str(DAYS_366_MS)))
    assert response.status_code == 302
    other.refresh_from_db()
    assert other.release_interval_ms == DAYS_366_MS


def test_release_interval_is_stored_to_the_millisecond(admin_client: Client) -> None:
    ch = channel()
    admin_client.post(CHANGELIST, list_edit_post(ch, release_interval_ms="1001"))
    ch.refresh_from_db()
    assert ch.release_interval_ms == 1001


def test_lowering_the_limit_below_in_flight_releases_nothing_more(admin_client: Client) -> None:
    ch = channel(max_concurrency=3)
    for n in range(5):
        api.enqueue(QUEUE, {"n": n}, channel="acme")
    assert len(dequeue(batch_size=10)) == 3

    admin_client.post(CHANGELIST, list_edit_post(ch, max_concurrency="1"))

    assert dequeue(batch_size=10) == []  # 3 in flight, limit 1: nothing more until below it
    ch.refresh_from_db()
    assert (ch.max_concurrency, ch.in_flight) == (1, 3)


def test_add_creates_the_channel_through_configure_channel(admin_client: Client) -> None:
    add_url = reverse("admin:django_lonnymq_channel_add")
    with mock.patch.object(api, "configure_channel", wraps=api.configure_channel) as configure:
        response = admin_client.post(
            add_url,
            {
                "queue": QUEUE,
                "name": "newco",
                "max_concurrency": "5",
                "release_interval_ms": "100",
                "paused": "on",
            },
        )
    assert response.status_code == 302, response.content.decode()[:3000]
    configure.assert_called_once()
    created = Channel.objects.get(queue=QUEUE, name="newco")
    assert (created.max_concurrency, created.release_interval_ms, created.paused) == (5, 100, True)


def test_add_of_an_existing_channel_is_refused(admin_client: Client) -> None:
    channel("acme")
    response = admin_client.post(
        reverse("admin:django_lonnymq_channel_add"),
        {"queue": QUEUE, "name": "acme", "max_concurrency": "5", "release_interval_ms": "0"},
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors


def test_change_form_keeps_queue_and_name_and_saves_limits(admin_client: Client) -> None:
    ch = channel(max_concurrency=2)
    response = admin_client.get(change_url(ch))
    assert response.status_code == 200
    assert 'name="name"' not in response.content.decode()  # read-only on change

    response = admin_client.post(
        change_url(ch), {"max_concurrency": "9", "release_interval_ms": "0", "paused": "on"}
    )
    assert response.status_code == 302
    ch.refresh_from_db()
    assert (ch.name, ch.max_concurrency, ch.paused) == ("acme", 9, True)


def test_pause_and_resume_actions(admin_client: Client) -> None:
    a, b = channel("a"), channel("b")
    response = admin_client.post(CHANGELIST, {"action": "pause", ACTION_CHECKBOX_NAME: [a.pk, b.pk]})
    assert response.status_code == 302
    assert set(Channel.objects.filter(queue=QUEUE).values_list("paused", flat=True)) == {True}
    api.enqueue(QUEUE, {"n": 1}, channel="a")
    assert dequeue() == []  # paused: nothing released

    admin_client.post(CHANGELIST, {"action": "resume", ACTION_CHECKBOX_NAME: [a.pk]})
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.paused, b.paused) == (False, True)
    assert len(dequeue()) == 1


def test_purge_asks_for_confirmation_then_deletes_waiting_messages_only(admin_client: Client) -> None:
    ch = channel()
    for n in range(4):
        api.enqueue(QUEUE, {"n": n}, channel="acme")
    api.enqueue(QUEUE, {"later": 1}, channel="acme", delay=60)
    leased = dequeue()
    assert len(leased) == 1

    response = admin_client.post(CHANGELIST, {"action": "purge_messages", ACTION_CHECKBOX_NAME: [ch.pk]})
    assert response.status_code == 200
    assert "Purge waiting messages?" in response.content.decode()
    assert Message.objects.filter(channel=ch).count() == 5  # nothing happened yet

    response = admin_client.post(
        CHANGELIST, {"action": "purge_messages", ACTION_CHECKBOX_NAME: [ch.pk], "post": "yes"}, follow=True
    )
    assert "Purged 4 waiting messages" in response.content.decode()
    assert list(Message.objects.filter(channel=ch).values_list("id", flat=True)) == [leased[0][0]]


def test_delete_is_refused_while_the_channel_has_messages(admin_client: Client) -> None:
    ch = channel()
    api.enqueue(QUEUE, {"n": 1}, channel="acme")
    delete_url = reverse("admin:django_lonnymq_channel_delete", args=[ch.pk])

    response = admin_client.get(delete_url)
    assert response.status_code == 200
    assert "messages of t_admin/acme" in response.content.decode()
    response = admin_client.post(delete_url, {"post": "yes"})
    assert Channel.objects.filter(pk=ch.pk).exists()

    api.purge_channel(ch.pk)
    response = admin_client.post(delete_url, {"post": "yes"})
    assert response.status_code == 302
    assert not Channel.objects.filter(pk=ch.pk).exists()


def test_delete_refuses_a_channel_with_a_message_in_flight(admin_client: Client) -> None:
    ch = channel()
    api.enqueue(QUEUE, {"n": 1}, channel="acme")
    assert len(dequeue()) == 1
    api.purge_channel(ch.pk)  # leaves the in-flight one
    admin_client.post(reverse("admin:django_lonnymq_channel_delete", args=[ch.pk]), {"post": "yes"})
    assert Channel.objects.filter(pk=ch.pk).exists()


def test_bulk_delete_action_is_not_offered(admin_client: Client) -> None:
    channel()
    response = admin_client.get(CHANGELIST)
    assert 'value="delete_selected"' not in response.content.decode()


# ---------------------------------------------------------------------------------------
# Permissions
# ---------------------------------------------------------------------------------------


def test_view_only_staff_sees_the_list_but_cannot_change_limits(viewer_client: Client) -> None:
    ch = channel(max_concurrency=2)
    response = viewer_client.get(CHANGELIST)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="form-0-max_concurrency"' not in html
    assert 'value="pause"' not in html and 'value="purge_messages"' not in html

    response = viewer_client.post(CHANGELIST, list_edit_post(ch, max_concurrency="50"))
    assert response.status_code == 403
    response = viewer_client.post(change_url(ch), {"max_concurrency": "50", "release_interval_ms": "0"})
    assert response.status_code == 403
    ch.refresh_from_db()
    assert ch.max_concurrency == 2


def test_view_only_staff_cannot_run_actions_or_add(viewer_client: Client) -> None:
    ch = channel()
    api.enqueue(QUEUE, {"n": 1}, channel="acme")
    viewer_client.post(CHANGELIST, {"action": "pause", ACTION_CHECKBOX_NAME: [ch.pk]})
    viewer_client.post(CHANGELIST, {"action": "purge_messages", ACTION_CHECKBOX_NAME: [ch.pk], "post": "yes"})
    ch.refresh_from_db()
    assert ch.paused is False
    assert Message.objects.filter(channel=ch).count() == 1
    assert viewer_client.get(reverse("admin:django_lonnymq_channel_add")).status_code == 403
    assert viewer_client.get(reverse("admin:django_lonnymq_channel_delete", args=[ch.pk])).status_code == 403


def test_change_permission_without_message_delete_cannot_purge(make_client) -> None:  # type: ignore[no-untyped-def]
    client = make_client("operator", ["view_channel", "change_channel"])
    ch = channel()
    api.enqueue(QUEUE, {"n": 1}, channel="acme")
    html = client.get(CHANGELIST).content.decode()
    assert 'value="pause"' in html and 'value="purge_messages"' not in html
    client.post(CHANGELIST, {"action": "purge_messages", ACTION_CHECKBOX_NAME: [ch.pk], "post": "yes"})
    assert Message.objects.filter(channel=ch).count() == 1
