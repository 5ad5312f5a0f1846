"""The dashboard (figures, SVG charts from recorded samples), ``manage.py lonnymq_stats``
and the Prometheus metrics view. Throughput comes from the channels' ``released_total``
counters, summed per queue in each sample."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from io import StringIO
from types import SimpleNamespace

import pytest
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from django_lonnymq import api
from django_lonnymq.admin.charts import nice_ceiling, thin, throughput_chart
from django_lonnymq.figures import format_age, format_throughput, released_between, throughput
from django_lonnymq.management.commands import lonnymq_stats
from django_lonnymq.models import QueueSample

from .conftest import QUEUE, ack, dequeue, fail, make_dead

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
    assert mine.released_total == 2  # the dead one's single delivery, and the one in flight
    assert mine.pk is None
    (other,) = QueueSample.live(["t_admin_other"])
    assert (other.queue, other.released_total) == ("t_admin_other", 0)


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
    assert {s.queue: s.released_total for s in recorded} == {QUEUE: 2, "t_admin_other": 0}
    assert QueueSample.objects.get(pk=recorded[0].pk).released_total == recorded[0].released_total
    assert QueueSample.objects.filter(queue=QUEUE).count() == 1  # the old one was pruned


def test_dashboard_renders_figures_and_svg_charts(admin_client: Client, busy_queue: None) -> None:
    QueueSample.record()
    (leased,) = dequeue()
    ack(leased[0], leased[8])  # one message done between the samples
    QueueSample.record()

    response = admin_client.get(DASHBOARD, {"queue": QUEUE, "minutes": "15"})

    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('<svg class="lq-chart"') == 3  # depth, throughput, net drain
    assert "<polyline" in html and "<rect" in html
    assert "depth (ready + scheduled)" in html and "oldest ready message has waited" in html
    assert "Throughput: messages released per minute" in html and "Net drain per minute" in html
    current = response.context["current"]
    assert (current.depth, current.in_flight, current.dead) == (3, 1, 1)
    assert response.context["sample_count"] == 2
    assert response.context["released_recently"] == 1  # the one dequeued between the samples
    assert "no counter" not in html
    assert "t_admin_other" in html  # the all-queues table and the selector


def _sample(queue: str) -> QueueSample:
    (sample,) = [s for s in QueueSample.record() if s.queue == queue]
    return sample


def _move(sample: QueueSample, at: datetime) -> None:
    QueueSample.objects.filter(pk=sample.pk).update(at=at)


def test_throughput_is_the_messages_dequeued_between_two_samples(admin_client: Client) -> None:
    for n in range(10):
        api.enqueue(QUEUE, {"n": n}, channel=("acme", "globex")[n % 2])
    first = _sample(QUEUE)
    leased = dequeue(batch_size=4)
    assert len(leased) == 4
    for row in leased[:3]:
        ack(row[0], row[8])  # one stays in flight: the counter counts releases, not acks
    for n in range(5):
        api.enqueue(QUEUE, {"late": n}, channel="acme")  # enqueued meanwhile: net drain sees them
    second = _sample(QUEUE)
    assert second.released_total - first.released_total == 4
    now = timezone.now()
    _move(first, now - timedelta(minutes=2))
    _move(second, now - timedelta(minutes=1))

    response = admin_client.get(DASHBOARD, {"queue": QUEUE, "minutes": "15"})

    context = response.context
    assert context["released_recently"] == 4
    assert context["released_in_window"] == 4
    assert context["released_since"] == now - timedelta(minutes=2)
    assert not context["released_dropped"]
    # 4 released from 2 minutes ago to now (the live figures are the newest point).
    assert context["throughput"] == "2.0"
    # The backlog grew from 10 to 12 (11 waiting + 1 in flight) meanwhile: net drain is
    # negative while 4 messages were in fact released.
    assert context["net_drain"] == "-1.0"
    html = response.content.decode()
    assert re.search(r'id="lq-released-recently"><div class="lq-value">4</div>', html), html
    assert "4.0 per minute at" in html  # the bar of the interval between the two samples
    assert "released in this window" in html


def test_throughput_counts_a_retried_message_once_per_delivery() -> None:
    message_id = api.enqueue(QUEUE, {"flaky": True}, channel="acme", max_attempts=3)
    first = _sample(QUEUE)
    (row,) = dequeue()
    assert fail(message_id, row[8]) == "retry"
    assert api.run_now([message_id]) == [message_id]
    (row,) = dequeue()
    assert row[0] == message_id and row[3] == 2  # the second attempt
    ack(message_id, row[8])
    second = _sample(QUEUE)
    assert released_between(first, second) == (2, False)


def test_deleted_channel_makes_the_sum_drop_and_it_is_clamped_at_zero(admin_client: Client) -> None:
    api.enqueue(QUEUE, {"n": 1}, channel="gone")
    api.enqueue(QUEUE, {"n": 2}, channel="stays")
    for row in dequeue(batch_size=2):
        ack(row[0], row[8])
    first = _sample(QUEUE)
    assert first.released_total == 2
    assert api.delete_channel(api.configure_channel(QUEUE, "gone")) == "deleted"
    second = _sample(QUEUE)
    assert second.released_total == 1  # the deleted channel's count left the sum
    _move(first, timezone.now() - timedelta(minutes=1))

    response = admin_client.get(DASHBOARD, {"queue": QUEUE, "minutes": "15"})

    assert response.context["released_recently"] == 0  # clamped, never negative
    assert response.context["throughput"] == "0.0"
    assert response.context["released_dropped"]
    html = response.content.decode()
    assert "counter dropped: counted as 0" in html and "a channel was deleted" in html


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
        "STATE",
        "CHANNELS",
        "PAUSED",
        "CH",
        "READY",
        "SCHEDULED",
        "DEPTH",
        "PAUSED",
        "IN",
        "FLIGHT",
        "DEAD",
        "RELEASED",
        "OLDEST",
        "READY",
        "RELEASED/MIN",
        "NET",
        "DRAIN/MIN",
    ]
    row = next(line for line in lines if line.startswith(QUEUE + " "))
    assert row.split()[:11] == [QUEUE, "running", "2", "0", "3", "1", "4", "0", "1", "1", "2"]
    assert row.split()[-2:] == ["-", "-"]  # no history: no rates
    assert any(line.startswith("t_admin_other") for line in lines)


def test_lonnymq_stats_json_and_record(busy_queue: None) -> None:
    out = StringIO()
    call_command("lonnymq_stats", "--json", "--record", "--queue", QUEUE, stdout=out)
    document = json.loads(out.getvalue())
    (row,) = document["queues"]
    keys = ("queue", "ready", "scheduled", "depth", "in_flight", "dead", "released_total")
    assert {k: row[k] for k in keys} == {
        "queue": QUEUE,
        "ready": 3,
        "scheduled": 1,
        "depth": 4,
        "in_flight": 1,
        "dead": 1,
        "released_total": 2,
    }
    assert row["released_per_minute"] is None  # a single sample: no rate yet
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
    # But 3 were released in that minute.
    assert row["released_total"] == 5
    assert row["released_per_minute"] == pytest.approx(3, rel=0.05)


def test_lonnymq_stats_interval_rates_without_recording(
    busy_queue: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--interval without --record: the rate comes from the command's own earlier round."""

    class TwoRounds:
        rounds = 0

        def is_set(self) -> bool:
            return self.rounds >= 2

        def set(self) -> None:
            self.rounds = 2

        def wait(self, timeout: float) -> None:
            self.rounds += 1
            if self.rounds == 1:  # between the rounds, a worker takes 3 messages
                assert len(dequeue(batch_size=3)) == 3
                time.sleep(0.5)

    monkeypatch.setattr(lonnymq_stats, "threading", SimpleNamespace(Event=TwoRounds))
    out = StringIO()
    call_command("lonnymq_stats", "--json", "--interval", "1m", "--queue", QUEUE, stdout=out)

    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["queues"][0]["released_per_minute"] is None
    assert second["queues"][0]["released_total"] - first["queues"][0]["released_total"] == 3
    minutes = (
        datetime.fromisoformat(second["at"]) - datetime.fromisoformat(first["at"])
    ).total_seconds() / 60
    assert second["queues"][0]["released_per_minute"] == pytest.approx(3 / minutes, rel=0.2)
    assert not QueueSample.objects.exists()


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
def test_metrics_view_says_which_gauges_are_estimated(client: Client, busy_queue: None) -> None:
    pytest.importorskip("prometheus_client")
    text = client.get("/metrics/").content.decode()
    assert "# TYPE lonnymq_stats_estimated gauge" in text
    assert re.search(rf'^lonnymq_stats_estimated{{queue="{QUEUE}"}} 0\.0$', text, re.MULTILINE), text
    with override_settings(LONNYMQ_STATS_COUNT_CAP=1):  # QUEUE holds 4 waiting messages
        text = client.get("/metrics/").content.decode()
    assert re.search(rf'^lonnymq_stats_estimated{{queue="{QUEUE}"}} 1\.0$', text, re.MULTILINE), text
    # 1 waiting message: not past a cap of 1.
    assert re.search(r'^lonnymq_stats_estimated\{queue="t_admin_other"\} 0\.0$', text, re.MULTILINE), text


def test_lonnymq_stats_marks_estimated_figures(busy_queue: None) -> None:
    out = StringIO()
    with override_settings(LONNYMQ_STATS_COUNT_CAP=1):
        call_command("lonnymq_stats", stdout=out)
        json_out = StringIO()
        call_command("lonnymq_stats", "--json", "--queue", QUEUE, stdout=json_out)
    row = next(line for line in out.getvalue().splitlines() if line.startswith(QUEUE + " ")).split()
    # READY, SCHEDULED, DEPTH, PAUSED, DEAD marked (from a sample of the table); the others exact.
    assert [cell.startswith("~") for cell in row[:11]] == [False] * 4 + [True] * 4 + [False, True, False]
    assert row[:4] + [row[8], row[9], row[10]] == [QUEUE, "running", "2", "0", "1", "~1", "2"]
    other = next(line for line in out.getvalue().splitlines() if line.startswith("t_admin_other"))
    assert "~" not in other
    (document,) = json.loads(json_out.getvalue())["queues"]
    assert (document["estimated"], document["in_flight"], document["dead"]) == (True, 1, 1)
    assert document["depth"] >= 2  # never below what the walk counted (cap + 1 = 2 messages)
    plain = StringIO()
    call_command("lonnymq_stats", "--json", "--queue", QUEUE, stdout=plain)
    assert json.loads(plain.getvalue())["queues"][0]["estimated"] is False


def test_dashboard_marks_estimated_figures(admin_client: Client, busy_queue: None) -> None:
    page = admin_client.get(DASHBOARD, {"queue": QUEUE}).content.decode()
    assert "lq-estimated" not in page
    with override_settings(LONNYMQ_STATS_COUNT_CAP=1):
        page = admin_client.get(DASHBOARD, {"queue": QUEUE}).content.decode()
    assert 'id="lq-estimated-help"' in page and "LONNYMQ_STATS_COUNT_CAP" in page
    # The selected queue's five counts in the cards, and its row of the table.
    assert page.count('<span class="lq-estimated"') == 10


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
    assert "# TYPE lonnymq_released_total counter" in text
    assert re.search(rf'^lonnymq_released_total{{queue="{QUEUE}"}} 2\.0$', text, re.MULTILINE), text
    assert re.search(r'^lonnymq_released_total\{queue="t_admin_other"\} 0\.0$', text, re.MULTILINE), text


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
    assert [format_throughput(r) for r in (None, 0, 2.25, 1234.4)] == ["-", "0.0", "2.2", "1,234"]


def test_throughput_from_samples_clamps_a_drop() -> None:
    start = timezone.now() - timedelta(minutes=4)

    def at(minute: int, released: int) -> QueueSample:
        return QueueSample(
            queue=QUEUE,
            at=start + timedelta(minutes=minute),
            channels=1,
            paused_channels=0,
            ready=0,
            scheduled=0,
            in_flight=0,
            dead=0,
            released_total=released,
        )

    # +10, then a channel holding 40 is deleted while 5 more are released (-35), then +6.
    samples = [at(0, 50), at(1, 60), at(2, 25), at(4, 31)]
    result = throughput(samples, since=start)
    assert result is not None
    assert (result.released, result.dropped, result.minutes) == (16, True, 4)
    assert result.per_minute == 4
    assert throughput(samples, since=start + timedelta(minutes=2)).released == 6  # type: ignore[union-attr]
    assert throughput(samples[:1], since=start) is None
    chart = throughput_chart(samples)
    assert chart is not None
    assert [bar["color"] for bar in chart.bars] == ["#6a4fb0", "#9a9a9a", "#6a4fb0"]
    assert "counted as 0" in chart.bars[1]["title"] and "35" in chart.bars[1]["title"]
    assert all(bar["height"] > 0 and bar["y"] + bar["height"] <= chart.bottom for bar in chart.bars)
    assert chart.note


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
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
    assert documents[0]["queues"][0]["released_per_minute"] is None
    assert documents[-1]["queues"][0]["released_per_minute"] == 0  # recorded rounds, nothing released
