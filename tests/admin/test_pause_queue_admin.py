"""Pausing a whole queue from the admin: the queue-limits page's actions, the dashboard's
Pause / Resume buttons and badges, and the paused state in ``lonnymq_stats``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from io import StringIO
from typing import Any
from unittest import mock

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from django_lonnymq import alarms, api
from django_lonnymq.models import QueueConfig

from .conftest import QUEUE, VIEW_PERMS, make_user

pytestmark = pytest.mark.django_db

QUEUE_LIST = reverse("admin:django_lonnymq_queueconfig_changelist")
DASHBOARD = reverse("admin:django_lonnymq_channel_dashboard")
OTHER = "t_admin_other"


def paused() -> set[str]:
    return alarms.paused_queues()


def action(client: Client, name: str, *queues: str) -> Any:
    return client.post(
        QUEUE_LIST, {"action": name, ACTION_CHECKBOX_NAME: list(queues), "index": "0"}, follow=True
    )


def test_the_limits_page_pauses_and_resumes_the_selected_queues(admin_client: Client) -> None:
    api.configure_queue(QUEUE, max_concurrency=5)
    api.configure_queue(OTHER, max_concurrency=2)
    page = admin_client.get(QUEUE_LIST).content.decode()
    assert "Pause the selected queues" in page and "Resume the selected queues" in page
    assert "column-paused" in page  # the paused column

    with mock.patch.object(api, "pause_queue", wraps=api.pause_queue) as pause:
        response = action(admin_client, "pause_queues", QUEUE, OTHER)
    assert [c.args[0] for c in pause.call_args_list] == [QUEUE, OTHER]  # once per row, through the API
    assert paused() == {QUEUE, OTHER}
    text = response.content.decode()
    assert f"Paused 2 queues: {QUEUE}, {OTHER}." in text
    assert 'alt="True"' in text  # the column shows it
    assert LogEntry.objects.filter(change_message="Paused the queue").count() == 2

    response = action(admin_client, "pause_queues", QUEUE)
    assert f"Already paused: {QUEUE}." in response.content.decode()

    with mock.patch.object(api, "resume_queue", wraps=api.resume_queue) as resume:
        response = action(admin_client, "resume_queues", QUEUE)
    assert [c.args[0] for c in resume.call_args_list] == [QUEUE]
    assert paused() == {OTHER}
    assert f"Resumed 1 queue: {QUEUE}." in response.content.decode()
    assert QueueConfig.objects.get(queue=QUEUE).max_concurrency == 5  # its limit kept


def test_resuming_a_queue_with_no_limit_removes_its_row(admin_client: Client) -> None:
    api.pause_queue(QUEUE)
    assert QUEUE in admin_client.get(QUEUE_LIST).content.decode()  # a paused queue has a row
    action(admin_client, "resume_queues", QUEUE)
    assert not QueueConfig.objects.filter(queue=QUEUE).exists() and paused() == set()


def test_a_viewer_gets_no_pause_action_and_a_forged_post_writes_nothing(
    make_client: Callable[..., Client],
) -> None:
    api.configure_queue(QUEUE, max_concurrency=5)
    api.pause_queue(OTHER)
    viewer = make_client("limits_viewer", [*VIEW_PERMS, "view_queueconfig"])
    page = viewer.get(QUEUE_LIST)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Pause the selected queues" not in html and "Resume the selected queues" not in html
    with (
        mock.patch.object(api, "pause_queue") as pause,
        mock.patch.object(api, "resume_queue") as resume,
    ):
        action(viewer, "pause_queues", QUEUE)
        action(viewer, "resume_queues", OTHER)
    pause.assert_not_called()
    resume.assert_not_called()
    assert paused() == {OTHER}
    assert not LogEntry.objects.exists()


def test_the_dashboard_shows_a_paused_queue_and_no_alarm_for_it(admin_client: Client, settings: Any) -> None:
    settings.LONNYMQ_HEALTH_REQUIRE_WORKERS = True  # ready messages and no worker: an alarm
    api.enqueue(QUEUE, {"n": 1}, channel="acme")
    api.enqueue(OTHER, {"n": 1}, channel="acme")
    api.pause_queue(QUEUE)
    html = admin_client.get(DASHBOARD, {"queue": QUEUE}).content.decode()
    assert f"Queue dashboard: {QUEUE} (paused)" in html  # the chosen queue's header
    assert 'id="lq-queue-paused"' in html and "Resume the queue" in html
    assert "waiting: the queue is paused" in html and "ready, waiting for a worker" not in html  # tenants
    rows = dict(re.findall(r'<a href="\?queue=([^&"]+)&amp;minutes=\d+">[^<]*</a>(.*?)</td>', html))
    assert "lq-queue-paused-badge" in rows[QUEUE] and "lq-queue-paused-badge" not in rows[OTHER]
    alarm_list = re.search(r'<div class="errornote lq-alarms".*?</div>', html, re.S)
    assert alarm_list is not None and OTHER in alarm_list.group(0)
    assert f"?queue={QUEUE}&amp;" not in alarm_list.group(0)  # a paused queue rings none

    html = admin_client.get(DASHBOARD, {"queue": OTHER}).content.decode()
    assert f"Queue dashboard: {OTHER} (paused)" not in html
    assert 'id="lq-queue-paused"' not in html


def test_the_dashboard_buttons_pause_and_resume_a_queue_without_a_limits_row(admin_client: Client) -> None:
    api.enqueue(QUEUE, {"n": 1}, channel="acme")
    assert not QueueConfig.objects.filter(queue=QUEUE).exists()
    html = admin_client.get(DASHBOARD, {"queue": QUEUE}).content.decode()
    assert 'name="action" value="pause"' in html and "csrfmiddlewaretoken" in html

    response = admin_client.post(DASHBOARD, {"queue": QUEUE, "action": "pause", "minutes": "15"})
    assert response.status_code == 302 and response["Location"] == f"{DASHBOARD}?queue={QUEUE}&minutes=15"
    assert paused() == {QUEUE}
    page = admin_client.get(response["Location"]).content.decode()
    assert f"Paused the queue “{QUEUE}”." in page
    assert 'name="action" value="resume"' in page

    admin_client.post(DASHBOARD, {"queue": QUEUE, "action": "resume"})
    assert paused() == set()
    response = admin_client.post(DASHBOARD, {"queue": "", "action": "pause"}, follow=True)
    assert "queue" in response.content.decode() and paused() == set()  # a bad name: an error, nothing written


def test_the_dashboard_buttons_need_the_change_permission_and_csrf(
    make_client: Callable[..., Client],
) -> None:
    api.enqueue(QUEUE, {"n": 1}, channel="acme")
    viewer = make_client("dash_viewer", [*VIEW_PERMS, "view_queueconfig"])
    html = viewer.get(DASHBOARD, {"queue": QUEUE}).content.decode()
    assert 'name="action"' not in html  # no buttons
    with mock.patch.object(api, "pause_queue") as pause:
        assert viewer.post(DASHBOARD, {"queue": QUEUE, "action": "pause"}).status_code == 403
    pause.assert_not_called()
    assert paused() == set()

    operator = Client(enforce_csrf_checks=True)
    operator.force_login(make_user("dash_operator", [*VIEW_PERMS, "change_queueconfig"]))
    page = operator.get(DASHBOARD, {"queue": QUEUE}).content.decode()
    assert 'name="action" value="pause"' in page
    assert operator.post(DASHBOARD, {"queue": QUEUE, "action": "pause"}).status_code == 403  # no token
    assert paused() == set()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    form = {"queue": QUEUE, "action": "pause", "csrfmiddlewaretoken": token.group(1)}
    assert operator.post(DASHBOARD, form).status_code == 302
    assert paused() == {QUEUE}


def test_lonnymq_stats_shows_the_paused_state(admin_client: Client) -> None:
    api.enqueue(QUEUE, {"n": 1}, channel="acme")
    api.enqueue(OTHER, {"n": 1}, channel="acme")
    api.pause_queue(QUEUE)
    out = StringIO()
    call_command("lonnymq_stats", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:2] == ["QUEUE", "STATE"]
    states = {line.split()[0]: line.split()[1] for line in lines[1:]}
    assert states[QUEUE] == "paused" and states[OTHER] == "running"

    out = StringIO()
    call_command("lonnymq_stats", "--json", stdout=out)
    rows = {row["queue"]: row for row in json.loads(out.getvalue())["queues"]}
    assert rows[QUEUE]["queue_paused"] is True and rows[OTHER]["queue_paused"] is False
    assert rows[QUEUE]["ready"] == 1  # its backlog is still counted
