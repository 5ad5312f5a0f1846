"""The dashboard (figures, SVG charts from recorded samples), ``manage.py lonnymq_stats``
and the Prometheus metrics view."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_lonnymq import api
from django_lonnymq.models import QueueSample
from django_lonnymq.views import format_age, nice_ceiling, thin

from .conftest import QUEUE, ack, dequeue, make_dead

pytestmark = pytest.mark.django_db

DASHBOARD = reverse("admin:django_lonnymq_channel_dashboard")


@pytest.fixture
def busy_queue() -> None:
    """3 ready, 1 scheduled, 1 in flight, 1 dead in QUEUE; 1 ready in another queue."""
    make_dead(channel="acme")
    for n in range(4):
        api.enqueue(QUEUE, {"n": n}, channel="acme" if n % 2 else "globex")
    assert len(dequeue()) == 1
    api.enqueue(QUEUE, {"later": True}, channel="acme", delay=timedelta(hours=1))
    api.enqueue("t_admin_other", {"n": 1})


def test_live_figures_are_exact(busy_queue: None) -> None:
    figures = {s.queue: s for s in QueueSample.live()}
    mine = figures[QUEUE]
    assert (mine.ready, mine.scheduled, mine.in_flight, mine.dead) == (3, 1, 1, 1)
    assert (mine.depth, mine.channels, mine.paused_channels) == (4, 2, 0)
    assert mine.oldest_ready_ms is not None and mine.oldest_ready_ms >= 0
    assert mine.pk is None
    assert [s.queue for s in QueueSample.live(["t_admin_other"])] == ["t_admin_other"]


def test_a_queue_with_only_dead_messages_is_listed() -> None:
    make_dead(queue="t_admin_dead_only")
    api.purge_channel(api.configure_channel("t_admin_dead_only", "acme"))
    (sample,) = QueueSample.live(["t_admin_dead_only"])
    assert (sample.depth, sample.dead, sample.oldest_ready_ms) == (0, 1, None)


def test_record_stores_and_prunes_samples(busy_queue: None) -> None:
    QueueSample.objects.create(
        queue=QUEUE,
        at=timezone.now() - timedelta(hours=2),
        channels=0,
        paused_channels=0,
        ready=0,
        scheduled=0,
        in_flight=0,
        dead=0,
    )
    recorded = QueueSample.record(keep_ms=60_000)
    assert {s.queue for s in recorded} == {QUEUE, "t_admin_other"}
    assert all(s.pk is not None for s in recorded)
    assert QueueSample.objects.filter(queue=QUEUE).count() == 1  # the old one was pruned


def test_dashboard_renders_figures_and_svg_charts(admin_client: Client, busy_queue: None) -> None:
    QueueSample.record()
    (leased,) = dequeue()
    ack(leased[0], leased[8])  # one message done between the samples
    QueueSample.record()

    response = admin_client.get(DASHBOARD, {"queue": QUEUE, "minutes": "15"})

    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('<svg class="lq-chart"') == 2
    assert "<polyline" in html and "<rect" in html
    assert "depth (ready + scheduled)" in html and "oldest ready message has waited" in html
    current = response.context["current"]
    assert (current.depth, current.in_flight, current.dead) == (3, 1, 1)
    assert response.context["sample_count"] == 2
    assert "t_admin_other" in html  # the all-queues table and the selector


def test_dashboard_without_samples_says_how_to_record(admin_client: Client, busy_queue: None) -> None:
    html = admin_client.get(DASHBOARD, {"queue": QUEUE}).content.decode()
    assert 'class="lq-chart"' not in html
    assert "lonnymq_stats --record" in html


def test_dashboard_with_no_queue_at_all(admin_client: Client) -> None:
    response = admin_client.get(DASHBOARD, {"queue": "nope", "minutes": "bogus"})
    assert response.status_code == 200
    assert "No queue yet" in response.content.decode()


def test_dashboard_needs_view_permission(make_client: Callable[..., Client], busy_queue: None) -> None:
    assert make_client("viewer", ["view_channel"]).get(DASHBOARD).status_code == 200
    assert make_client("nobody", []).get(DASHBOARD).status_code == 403
    anonymous = Client().get(DASHBOARD)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]


def test_lonnymq_stats_prints_a_table(busy_queue: None) -> None:
    out = StringIO()
    call_command("lonnymq_stats", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == [
        "QUEUE",
        "CHANNELS",
        "PAUSED",
        "READY",
        "SCHEDULED",
        "DEPTH",
        "IN",
        "FLIGHT",
        "DEAD",
        "OLDEST",
        "READY",
        "NET",
        "DRAIN/MIN",
    ]
    row = next(line for line in lines if line.startswith(QUEUE + " "))
    assert row.split()[:8] == [QUEUE, "2", "0", "3", "1", "4", "1", "1"]
    assert any(line.startswith("t_admin_other") for line in lines)


def test_lonnymq_stats_json_and_record(busy_queue: None) -> None:
    out = StringIO()
    call_command("lonnymq_stats", "--json", "--record", "--queue", QUEUE, stdout=out)
    document = json.loads(out.getvalue())
    (row,) = document["queues"]
    assert {k: row[k] for k in ("queue", "ready", "scheduled", "depth", "in_flight", "dead")} == {
        "queue": QUEUE,
        "ready": 3,
        "scheduled": 1,
        "depth": 4,
        "in_flight": 1,
        "dead": 1,
    }
    assert QueueSample.objects.filter(queue=QUEUE).count() == 1
    assert QueueSample.objects.filter(queue="t_admin_other").count() == 1  # --record samples every queue


def test_lonnymq_stats_net_drain_from_samples(busy_queue: None) -> None:
    QueueSample.record()
    assert len(dequeue(batch_size=3)) == 3
    QueueSample.objects.update(at=QueueSample.objects.first().at - timedelta(minutes=1))  # type: ignore[union-attr]
    out = StringIO()
    call_command("lonnymq_stats", "--json", stdout=out)
    row = next(r for r in json.loads(out.getvalue())["queues"] if r["queue"] == QUEUE)
    # Leasing does not shrink the backlog (depth + in flight): net drain about 0 per minute.
    assert row["net_drain_per_minute"] == pytest.approx(0, abs=0.01)


def test_lonnymq_stats_flags_are_checked() -> None:
    with pytest.raises(CommandError):
        call_command("lonnymq_stats", "--keep", "10s")
    with pytest.raises(CommandError):
        call_command("lonnymq_stats", "--interval", "soon")


def test_lonnymq_stats_with_nothing() -> None:
    out = StringIO()
    call_command("lonnymq_stats", stdout=out)
    assert "No queues yet" in out.getvalue()


@pytest.mark.urls("tests.admin.urls")
def test_metrics_view_exports_gauges_per_queue(client: Client, busy_queue: None) -> None:
    pytest.importorskip("prometheus_client")
    response = client.get("/metrics/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    for name, value in [
        ("lonnymq_ready_messages", 3),
        ("lonnymq_scheduled_messages", 1),
        ("lonnymq_in_flight_messages", 1),
        ("lonnymq_dead_messages", 1),
    ]:
        assert re.search(rf'^{name}{{queue="{QUEUE}"}} {value}\.0$', text, re.MULTILINE), (name, text)
    assert re.search(rf'^lonnymq_oldest_ready_age_seconds{{queue="{QUEUE}"}} [0-9.e+-]+$', text, re.MULTILINE)


@pytest.mark.urls("tests.admin.urls")
def test_metrics_view_without_prometheus_client(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    response = client.get("/metrics/")
    assert response.status_code == 501
    assert "django-lonnymq[metrics]" in response.content.decode()


def test_chart_helpers() -> None:
    assert [nice_ceiling(v) for v in (0, 1, 3, 7, 11, 240, 2600)] == [1, 1, 5, 10, 20, 250, 5000]
    assert [format_age(s) for s in (None, 0.25, 42, 190, 7500, 200000)] == [
        "-",
        "250 ms",
        "42 s",
        "3 min 10 s",
        "2 h 5 min",
        "2 d 7 h",
    ]
    points = list(range(1000))
    thinned = thin(points, 10)  # type: ignore[arg-type]
    assert len(thinned) == 10 and thinned[0] == 0 and thinned[-1] == 999


def test_lonnymq_stats_record_interval_runs_until_sigterm(transactional_db: None) -> None:
    """The real command as a subprocess: records every interval, exits 0 on SIGTERM."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT, worker_env

    api.enqueue(QUEUE, {"n": 1})
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "lonnymq_stats", "--record", "--interval=200ms", "--json"],
        cwd=ROOT,
        env=worker_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while QueueSample.objects.filter(queue=QUEUE).count() < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    documents = [json.loads(line) for line in out.splitlines()]
    assert len(documents) >= 3
    assert documents[0]["queues"][0]["ready"] == 1
