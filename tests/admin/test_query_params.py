"""URL parameters no name or id can hold answer 200 with nothing matched, never HTTP 500."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.urls import reverse

from django_lonnymq import enqueue

from .conftest import make_dead

MESSAGES = reverse("admin:django_lonnymq_message_changelist")
DEAD = reverse("admin:django_lonnymq_deadmessage_changelist")
DASHBOARD = reverse("admin:django_lonnymq_channel_dashboard")


@pytest.fixture
def rows(db):
    enqueue("params", {"n": 1}, channel="acme")
    make_dead()


@pytest.mark.parametrize(
    ("page", "params"),
    [
        (MESSAGES, {"q": "²"}),
        (MESSAGES, {"q": "99999999999999999999999"}),
        (MESSAGES, {"queue": "pa\x00rams"}),
        (DEAD, {"queue": "a\x00b"}),
        (DEAD, {"queue": "params", "channel_name": "ac\x00me"}),
        (DEAD, {"q": "¹²³"}),
        (DASHBOARD, {"queue": "pa\x00rams"}),
    ],
)
def test_unmatchable_parameters_answer_200(admin_client, rows, page, params):
    response = admin_client.get(f"{page}?{urlencode(params)}")
    assert response.status_code == 200, response.content[:500]
    if page != DASHBOARD:
        assert response.context["cl"].result_count == 0


@pytest.mark.parametrize("channel", ["²", "99999999999999999999999", "-3"])
def test_a_channel_filter_that_is_not_an_id_is_refused_cleanly(admin_client, rows, channel):
    # Django's changelist answers a bad lookup with a redirect to ?e=1 (not a 500).
    response = admin_client.get(f"{MESSAGES}?{urlencode({'channel': channel})}")
    assert response.status_code in (200, 302)
    assert response.status_code != 500
