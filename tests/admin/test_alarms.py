"""The alarms that ring by default (django_lonnymq.alarms): a queue with ready messages and
no live worker, or a ready message waiting longer than LONNYMQ_HEALTH_MAX_READY_AGE, fails
``lonnymq_health`` (exit status 1), shows on the dashboard, and the figures behind them are
on the real /metrics endpoint. A paused channel's backlog never rings."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
import requests
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from django_lonnymq import api
from django_lonnymq.models import Worker
from tests.conftest import ROOT, worker_env

QUEUE = "t_alarm"
DASHBOARD = reverse("admin:django_lonnymq_channel_dashboard")
# The other sections of the command judged loosely: only the alarms are under test.
LOOSE = ["--max-dead-tuples", "100000000", "--max-xact-age", "100000", "--check-grace", "60"]


def _health(*args: str) -> tuple[dict[str, Any], str | None]:
    out = StringIO()
    try:
        call_command("lonnymq_health", "--json", *LOOSE, *args, stdout=out)
    except CommandError as exc:
        return json.loads(out.getvalue()), str(exc)
    return json.loads(out.getvalue()), None


def live_worker(queues: list[str], *, silent_for: timedelta = timedelta(0), name: str = "w-1") -> None:
    now = timezone.now()
    Worker.objects.create(
        name=name, instance=uuid.uuid4(), host="h", pid=1, queues=queues, concurrency=1,
        started_at=now - timedelta(hours=1), heartbeat_at=now - silent_for,
    )  # fmt: skip


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
@pytest.mark.django_db(transaction=True)
def test_an_unserved_queue_fails_the_command_by_default() -> None:
    api.enqueue(QUEUE, {"n": 1}, channel="acme")
    run = [sys.executable, str(ROOT / "manage.py"), "lonnymq_health", *LOOSE]
    done = subprocess.run(run, cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0, done.stdout + done.stderr
    assert f"queue {QUEUE}: 1 ready message(s) and no live worker serves it" in done.stderr
    assert f"PROBLEM: queue {QUEUE}" in done.stdout
    # A lost worker (silent longer than LONNYMQ_WORKER_LOST_AFTER) serves nothing.
    live_worker([QUEUE], silent_for=timedelta(minutes=5))
    done = subprocess.run(run, cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "no live worker" in done.stderr
    # A live worker of the queue, and its messages are fresh: healthy.
    live_worker([QUEUE, "other"], name="w-2")
    done = subprocess.run(run, cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"queue {QUEUE}: 1 ready" in done.stdout and "1 live worker(s)" in done.stdout


@pytest.mark.django_db
def test_a_worker_of_another_queue_does_not_serve_it() -> None:
    api.enqueue(QUEUE, {"n": 1})
    live_worker(["elsewhere"])
    report, error = _health()
    assert error is not None and f"queue {QUEUE}" in error and "no live worker" in error
    assert report["alarms"] == [{"queue": QUEUE, "kind": "unserved", "text": report["problems"][0]}]
    assert report["queues"][QUEUE]["live_workers"] == 0
    # The flag overrides the setting.
    assert _health("--no-require-workers")[1] is None
    with override_settings(LONNYMQ_HEALTH_REQUIRE_WORKERS=False):
        assert _health()[1] is None
        assert _health("--require-workers")[1] is not None


@pytest.mark.django_db
def test_a_paused_channels_backlog_is_healthy() -> None:
    an_hour_ago = timezone.now() - timedelta(hours=1)
    for n in range(3):
        api.enqueue(QUEUE, {"n": n}, channel="held", run_at=an_hour_ago)
    api.configure_channel(QUEUE, "held", paused=True)
    report, error = _health()
    assert error is None, report["problems"]
    assert report["queues"][QUEUE]["paused"] == 3 and report["queues"][QUEUE]["ready"] == 0


@pytest.mark.django_db
def test_an_old_ready_message_fails_even_with_a_live_worker() -> None:
    api.enqueue(QUEUE, {"n": 1}, run_at=timezone.now() - timedelta(minutes=10))
    live_worker([QUEUE])
    report, error = _health()
    assert error is not None and f"queue {QUEUE}: a ready message has been due for 10 min" in error
    assert "more than 300s" in error
    assert _health("--max-ready-age", "3600")[1] is None
    assert _health("--no-ready-age")[1] is None
    with override_settings(LONNYMQ_HEALTH_MAX_READY_AGE=timedelta(hours=1)):
        assert _health()[1] is None
    with override_settings(LONNYMQ_HEALTH_MAX_READY_AGE=None):
        assert _health()[1] is None


@pytest.mark.django_db
def test_the_dashboard_shows_the_alarms(admin_client: Client) -> None:
    api.enqueue(QUEUE, {"n": 1})
    api.enqueue("t_alarm_old", {"n": 1}, run_at=timezone.now() - timedelta(minutes=10))
    live_worker(["t_alarm_old"])
    page = admin_client.get(DASHBOARD).content.decode()
    assert 'id="lq-alarms"' in page
    assert f"queue {QUEUE}: 1 ready message(s) and no live worker serves it" in page
    assert "queue t_alarm_old: a ready message has been due for 10 min" in page
    # Served and fresh: no warning.
    live_worker([QUEUE], name="w-2")
    api.purge_channel(api.configure_channel("t_alarm_old", "default"))
    page = admin_client.get(DASHBOARD).content.decode()
    assert 'id="lq-alarms"' not in page


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.admin.urls")
def test_metrics_over_http_carry_the_alarm_series(live_server: Any) -> None:
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    api.enqueue(QUEUE, {"n": 1}, run_at=timezone.now() - timedelta(minutes=2))
    api.enqueue("t_alarm_served", {"n": 1})
    live_worker(["t_alarm_served"])
    response = requests.get(f"{live_server.url}/metrics/", timeout=10)
    assert response.status_code == 200
    samples = {
        (sample.name, sample.labels.get("queue")): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }
    assert samples[("lonnymq_live_workers", QUEUE)] == 0
    assert samples[("lonnymq_live_workers", "t_alarm_served")] == 1
    assert 119 <= samples[("lonnymq_oldest_ready_age_seconds", QUEUE)] < 600
    assert samples[("lonnymq_oldest_ready_age_seconds", "t_alarm_served")] < 60


@pytest.mark.django_db
def test_the_health_figures_agree_with_the_exact_stats_and_stop_counting_at_the_cap() -> None:
    """alarms.health_figures (the health command's figures, named statement queue_health)
    reads each queue's ready and paused messages up to a cap, and the oldest ready one's age
    exactly: below the cap, what QueueSample.live counts in full."""
    from django_lonnymq import alarms
    from django_lonnymq.models import QueueSample

    an_hour_ago = timezone.now() - timedelta(hours=1)
    for n in range(4):
        api.enqueue(QUEUE, {"n": n}, channel=f"c{n % 2}", run_at=an_hour_ago + timedelta(seconds=n))
    api.enqueue(QUEUE, {"n": "later"}, channel="c0", delay=3600)
    for n in range(2):
        api.enqueue(QUEUE, {"n": n}, channel="held", run_at=an_hour_ago)
    api.configure_channel(QUEUE, "held", paused=True)
    [exact] = QueueSample.live([QUEUE])
    [found] = [sample for sample in alarms.health_figures() if sample.queue == QUEUE]
    assert (found.ready, found.paused) == (exact.ready, exact.paused) == (4, 2)
    assert exact.oldest_ready_ms is not None and found.oldest_ready_ms is not None
    assert 3_599_000 <= exact.oldest_ready_ms <= found.oldest_ready_ms <= exact.oldest_ready_ms + 60_000
    [capped] = [sample for sample in alarms.health_figures(cap=2) if sample.queue == QUEUE]
    assert (capped.ready, capped.paused, capped.counted_up_to) == (3, 2, 2)
    assert alarms.count_text(capped.ready, capped) == "more than 2"
    assert alarms.count_text(found.ready, found) == "4"
    [unserved, _] = alarms.alarms([capped], {}, max_age=60, workers_required=True)
    assert "more than 2 ready message(s) and no live worker" in unserved.text
    # The command reports them with their cap.
    report, error = _health()
    assert error is not None
    figures = report["queues"][QUEUE]
    assert (figures["ready"], figures["paused"], figures["counted_up_to"]) == (4, 2, alarms.HEALTH_COUNT_CAP)
    assert figures["oldest_ready_s"] >= 3599
