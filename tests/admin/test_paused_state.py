"""Paused is a state of its own: a paused channel's waiting messages show as paused in the
message list, the dashboard, ``lonnymq_stats``, the metrics and ``lonnymq_health``, and never
as ready, scheduled or the oldest ready message."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_lonnymq import api
from django_lonnymq.models import Message, QueueSample

pytestmark = pytest.mark.django_db

QUEUE = "t_paused"
MESSAGES = reverse("admin:django_lonnymq_message_changelist")
DASHBOARD = reverse("admin:django_lonnymq_channel_dashboard")


@pytest.fixture
def paused_tenant() -> dict[str, list[int]]:
    """Channel "held": 3 messages due an hour ago and 1 due in an hour, then paused.
    Channel "open": 1 message due now, 1 due in an hour."""
    an_hour_ago = timezone.now() - timedelta(hours=1)
    held = [api.enqueue(QUEUE, {"n": n}, channel="held", run_at=an_hour_ago) for n in range(3)]
    held.append(api.enqueue(QUEUE, {"later": True}, channel="held", delay=timedelta(hours=1)))
    api.configure_channel(QUEUE, "held", paused=True)
    ready = [api.enqueue(QUEUE, {"n": 9}, channel="open")]
    scheduled = [api.enqueue(QUEUE, {"later": True}, channel="open", delay=timedelta(hours=1))]
    return {"held": held, "ready": ready, "scheduled": scheduled}


def test_live_figures_count_paused_apart(paused_tenant: dict[str, list[int]]) -> None:
    (sample,) = QueueSample.live([QUEUE])
    assert (sample.ready, sample.scheduled, sample.paused, sample.in_flight) == (1, 1, 4, 0)
    assert (sample.depth, sample.backlog, sample.paused_channels) == (2, 6, 1)
    # The paused channel's messages have waited an hour; the oldest ready one only just.
    assert sample.oldest_ready_seconds is not None and sample.oldest_ready_seconds < 600
    (recorded,) = [s for s in QueueSample.record() if s.queue == QUEUE]
    assert QueueSample.objects.get(pk=recorded.pk).paused == 4


def test_resuming_makes_them_ready_again(paused_tenant: dict[str, list[int]]) -> None:
    api.configure_channel(QUEUE, "held", paused=False)
    (sample,) = QueueSample.live([QUEUE])
    assert (sample.ready, sample.scheduled, sample.paused) == (4, 2, 0)
    assert sample.oldest_ready_seconds is not None and sample.oldest_ready_seconds >= 3500


def test_message_list_shows_and_filters_paused(
    admin_client: Client, paused_tenant: dict[str, list[int]]
) -> None:
    def ids(state: str) -> set[int]:
        response = admin_client.get(MESSAGES, {"state": state})
        assert response.status_code == 200
        return {m.pk for m in response.context["cl"].result_list}

    assert ids("paused") == set(paused_tenant["held"])
    assert ids("ready") == set(paused_tenant["ready"])
    assert ids("scheduled") == set(paused_tenant["scheduled"])
    assert ids("in_flight") == set()
    html = admin_client.get(MESSAGES, {"state": "paused"}).content.decode()
    assert html.count('<td class="field-state_display">paused</td>') == 4
    assert Message.objects.get(pk=paused_tenant["held"][0]).state == "paused"


def test_dashboard_tile_and_table(admin_client: Client, paused_tenant: dict[str, list[int]]) -> None:
    response = admin_client.get(DASHBOARD, {"queue": QUEUE})
    html = response.content.decode()
    tile = re.search(
        r'id="lq-paused"><div class="lq-value">(\d+)</div><div class="lq-label"[^>]*>([^<]*)<', html
    )
    assert tile is not None and tile.groups() == ("4", "paused (1 channel)")
    current = response.context["current"]
    assert (current.ready, current.paused) == (1, 4)
    assert response.context["oldest_ready"].endswith(" s") or response.context["oldest_ready"].endswith("ms")


def test_stats_command_has_a_paused_column(paused_tenant: dict[str, list[int]]) -> None:
    out = StringIO()
    call_command("lonnymq_stats", "--json", "--queue", QUEUE, stdout=out)
    (row,) = json.loads(out.getvalue())["queues"]
    assert (row["ready"], row["scheduled"], row["paused"], row["depth"]) == (1, 1, 4, 2)
    assert row["oldest_ready_seconds"] < 600


@pytest.mark.urls("tests.admin.urls")
def test_metrics_export_paused_messages(client: Client, paused_tenant: dict[str, list[int]]) -> None:
    text = client.get("/metrics/").content.decode()
    assert re.search(rf'^lonnymq_paused_messages{{queue="{QUEUE}"}} 4\.0$', text, re.MULTILINE), text
    assert re.search(rf'^lonnymq_ready_messages{{queue="{QUEUE}"}} 1\.0$', text, re.MULTILINE), text
    age = re.search(
        rf'^lonnymq_oldest_ready_age_seconds{{queue="{QUEUE}"}} ([0-9.e+-]+)$', text, re.MULTILINE
    )
    assert age is not None and float(age[1]) < 600


def _health(*args: str) -> tuple[dict, str | None]:
    out = StringIO()
    try:
        call_command("lonnymq_health", "--json", *args, stdout=out)
    except CommandError as exc:
        return json.loads(out.getvalue()), str(exc)
    return json.loads(out.getvalue()), None


def test_health_oldest_ready_ignores_paused_channels(paused_tenant: dict[str, list[int]]) -> None:
    # No worker runs here: judge the ready age alone.
    report, error = _health("--max-ready-age", "600", "--no-require-workers")
    assert error is None, report["problems"]
    figures = report["queues"][QUEUE]
    assert figures["paused"] == 4 and figures["ready"] == 1
    assert figures["oldest_ready_s"] < 600
    # Resumed, its hour-old messages are ready: the same threshold now fails.
    api.configure_channel(QUEUE, "held", paused=False)
    report, error = _health("--max-ready-age", "600", "--no-require-workers")
    assert error is not None and f"queue {QUEUE}: a ready message has been due for" in error
    assert report["queues"][QUEUE]["oldest_ready_s"] >= 3500


@pytest.mark.urls("tests.admin.urls")
def test_metrics_export_live_workers_per_queue(client: Client, paused_tenant: dict[str, list[int]]) -> None:
    """The "no live worker" alert's gauge: live rows of lonnymq_worker per queue they serve."""
    import uuid

    from django_lonnymq.models import Worker

    now = timezone.now()

    def row(name: str, queues: list[str], **times: object) -> None:
        Worker.objects.create(
            name=name, instance=uuid.uuid4(), host="h", pid=1, queues=queues, concurrency=1,
            started_at=now - timedelta(hours=1), **{"heartbeat_at": now, **times},
        )  # fmt: skip

    row("live-1", [QUEUE, "t_other_q"])
    row("live-2", [QUEUE])
    row("lost", [QUEUE, "t_unserved"], heartbeat_at=now - timedelta(minutes=10))
    row("stopped", ["t_unserved"], stopped_at=now)
    text = client.get("/metrics/").content.decode()
    for queue, value in [(QUEUE, 2), ("t_other_q", 1)]:
        assert re.search(rf'^lonnymq_live_workers{{queue="{queue}"}} {value}\.0$', text, re.MULTILINE), text
    assert (
        'lonnymq_live_workers{queue="t_unserved"}' not in text
    )  # no messages, no live worker: not a queue yet
    api.enqueue("t_unserved", {"n": 1})
    text = client.get("/metrics/").content.decode()
    assert re.search(r'^lonnymq_live_workers\{queue="t_unserved"\} 0\.0$', text, re.MULTILINE), text


def test_channel_list_shows_a_paused_channels_messages_as_paused(
    admin_client: Client, paused_tenant: dict[str, list[int]]
) -> None:
    html = admin_client.get(
        reverse("admin:django_lonnymq_channel_changelist"), {"queue": QUEUE}
    ).content.decode()
    held = re.search(rf"<tr>(?:(?!</tr>).)*>{QUEUE}/held \(paused\)<(?:(?!</tr>).)*</tr>", html, re.S)
    assert held is not None
    assert '<td class="field-waiting_count">paused (4)</td>' in held[0]  # 3 due, 1 later
    open_row = re.search(rf"<tr>(?:(?!</tr>).)*>{QUEUE}/open<(?:(?!</tr>).)*</tr>", html, re.S)
    assert open_row is not None and '<td class="field-waiting_count">1 / 1</td>' in open_row[0]
