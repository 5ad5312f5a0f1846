"""Operators' views: the dashboard's figures and charts (rendered by the Channel admin at
``admin/django_lonnymq/channel/dashboard/``) and the Prometheus ``metrics`` view.

The figures come from ``QueueSample.live()`` (exact, one SQL function call for all queues)
and the history from ``lonnymq_queue_sample`` rows that ``manage.py lonnymq_stats --record``
writes. See docs/admin.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from .conf import settings
from .models import DeadMessage, QueueSample

# Dashboard windows (minutes) and the default one.
WINDOWS = [(15, "15 minutes"), (60, "1 hour"), (360, "6 hours"), (1440, "24 hours")]
DEFAULT_WINDOW = 60
# The rate figures (net drain, dead) look back this far.
RATE_WINDOW = timedelta(minutes=5)
# Most points drawn per line (longer histories are thinned evenly).
MAX_POINTS = 360

COLORS = {
    "depth": "#2f6fb0",
    "in_flight": "#e08a1e",
    "dead": "#b03a2e",
    "drain": "#3c8f4a",
    "grow": "#b03a2e",
}


# ---------------------------------------------------------------------------------------
# Rates from samples
# ---------------------------------------------------------------------------------------


def backlog(sample: QueueSample) -> int:
    """Messages not yet done: waiting (ready + scheduled) plus in flight."""
    return sample.ready + sample.scheduled + sample.in_flight


def net_drain_per_minute(samples: Sequence[QueueSample], since: datetime) -> float | None:
    """How fast the backlog (ready + scheduled + in flight) shrank since ``since``, per minute.

    This is the processing rate minus the enqueue rate: it equals throughput while nothing is
    enqueued, and it is negative while the backlog grows. The queue keeps no counter of
    completed messages (acks delete them), so true throughput cannot be derived from samples.
    None when fewer than two samples fall in the window.
    """
    window = [s for s in samples if s.at >= since]
    if len(window) < 2:
        return None
    minutes = (window[-1].at - window[0].at).total_seconds() / 60
    if minutes <= 0:
        return None
    return (backlog(window[0]) - backlog(window[-1])) / minutes


def format_age(seconds: float | None) -> str:
    """A short human duration: '850 ms', '42 s', '3 min 10 s', '2 h 5 min', '3 d 4 h'."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def format_rate(rate: float | None) -> str:
    if rate is None:
        return "-"
    return f"{rate:+,.1f}" if abs(rate) < 100 else f"{rate:+,.0f}"


# ---------------------------------------------------------------------------------------
# Server-rendered SVG charts
# ---------------------------------------------------------------------------------------


@dataclass
class Chart:
    """Coordinates for the dashboard template to draw one SVG chart."""

    title: str
    width: int = 760
    height: int = 220
    left: int = 60
    right: int = 748
    top: int = 14
    bottom: int = 192
    lines: list[dict[str, Any]] = field(default_factory=list)
    bars: list[dict[str, Any]] = field(default_factory=list)
    y_ticks: list[dict[str, Any]] = field(default_factory=list)
    x_ticks: list[dict[str, Any]] = field(default_factory=list)
    zero_y: float = 0.0
    legend: list[dict[str, str]] = field(default_factory=list)


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^n that is at least ``value`` (1 for zero)."""
    if value <= 0:
        return 1
    exponent = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * exponent >= value:
            return step * exponent
    return 10 * exponent


def _label(value: float) -> str:
    if abs(value) >= 10_000:
        return f"{value / 1000:,.0f}k"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


def thin(points: Sequence[QueueSample], limit: int = MAX_POINTS) -> list[QueueSample]:
    """At most ``limit`` points, evenly spread, always keeping the last."""
    if len(points) <= limit:
        return list(points)
    step = len(points) / (limit - 1)
    picked = [points[int(i * step)] for i in range(limit - 1)]
    return [*picked, points[-1]]


def _time_axis(chart: Chart, start: float, end: float) -> None:
    span = max(end - start, 1e-3)
    fmt = "%H:%M:%S" if span < 600 else "%H:%M"
    for i in range(5):
        t = start + span * i / 4
        chart.x_ticks.append(
            {
                "x": round(chart.left + (chart.right - chart.left) * i / 4, 1),
                "label": timezone.localtime(
                    datetime.fromtimestamp(t, tz=timezone.get_current_timezone())
                ).strftime(fmt),
            }
        )


def backlog_chart(points: Sequence[QueueSample]) -> Chart | None:
    """Lines: depth (ready + scheduled), in flight and dead over time."""
    if len(points) < 2:
        return None
    chart = Chart(title="Depth, in flight and dead")
    series = [("depth", "depth (ready + scheduled)"), ("in_flight", "in flight"), ("dead", "dead")]
    start, end = points[0].at.timestamp(), points[-1].at.timestamp()
    span = max(end - start, 1e-3)
    top_value = nice_ceiling(max(max(getattr(p, attr) for p in points) for attr, _ in series))
    height = chart.bottom - chart.top

    def x(at: datetime) -> float:
        return chart.left + (at.timestamp() - start) / span * (chart.right - chart.left)

    def y(value: float) -> float:
        return chart.bottom - value / top_value * height

    for attr, label in series:
        coords = " ".join(f"{x(p.at):.1f},{y(getattr(p, attr)):.1f}" for p in points)
        chart.lines.append({"points": coords, "color": COLORS[attr], "label": label})
        chart.legend.append({"color": COLORS[attr], "label": label})
    for i in range(5):
        value = top_value * i / 4
        chart.y_ticks.append({"y": round(y(value), 1), "label": _label(value)})
    chart.zero_y = chart.bottom
    _time_axis(chart, start, end)
    return chart


def drain_chart(points: Sequence[QueueSample]) -> Chart | None:
    """Bars: net drain per minute between consecutive samples (up: draining, down: growing)."""
    if len(points) < 2:
        return None
    chart = Chart(title="Net drain per minute", height=160, bottom=132)
    rates = []
    for a, b in zip(points[:-1], points[1:], strict=True):
        minutes = (b.at - a.at).total_seconds() / 60
        if minutes > 0:
            rates.append((a, b, (backlog(a) - backlog(b)) / minutes))
    if not rates:
        return None
    start, end = points[0].at.timestamp(), points[-1].at.timestamp()
    span = max(end - start, 1e-3)
    top_value = nice_ceiling(max(abs(rate) for _, _, rate in rates))
    middle = (chart.top + chart.bottom) / 2
    half = (chart.bottom - chart.top) / 2

    def x(at: datetime) -> float:
        return chart.left + (at.timestamp() - start) / span * (chart.right - chart.left)

    for a, b, rate in rates:
        x0, x1 = x(a.at), x(b.at)
        bar_height = abs(rate) / top_value * half
        chart.bars.append(
            {
                "x": round(x0 + 0.5, 1),
                "width": round(max(x1 - x0 - 1, 1), 1),
                "y": round(middle - bar_height if rate >= 0 else middle, 1),
                "height": round(max(bar_height, 0.5), 1),
                "color": COLORS["drain"] if rate >= 0 else COLORS["grow"],
                "title": f"{format_rate(rate)} per minute at {timezone.localtime(b.at):%H:%M:%S}",
            }
        )
    for value in (top_value, top_value / 2, 0, -top_value / 2, -top_value):
        chart.y_ticks.append({"y": round(middle - value / top_value * half, 1), "label": _label(value)})
    chart.zero_y = middle
    chart.legend = [
        {"color": COLORS["drain"], "label": "backlog shrinking"},
        {"color": COLORS["grow"], "label": "backlog growing"},
    ]
    _time_axis(chart, start, end)
    return chart


# ---------------------------------------------------------------------------------------
# The dashboard's context (the view itself is ChannelAdmin.dashboard_view)
# ---------------------------------------------------------------------------------------


def dashboard_context(request: HttpRequest, *, using: str | None = None) -> dict[str, Any]:
    """Figures of every queue, and history, rates and charts of the chosen one."""
    alias = using or settings.DATABASE
    live = QueueSample.live(using=alias)
    names = [sample.queue for sample in live]
    selected = request.GET.get("queue") or (names[0] if names else "")
    try:
        minutes = int(request.GET.get("minutes", DEFAULT_WINDOW))
    except ValueError:
        minutes = DEFAULT_WINDOW
    if minutes not in dict(WINDOWS):
        minutes = DEFAULT_WINDOW
    current = next((sample for sample in live if sample.queue == selected), None)
    now = timezone.now()
    history = list(
        QueueSample.objects.using(alias)
        .filter(queue=selected, at__gte=now - timedelta(minutes=minutes))
        .order_by("at")
    )
    # The live figures are the newest point, so the charts and rates end at "now".
    points = [*history, current] if current is not None and history else history
    drawn = thin(points)
    died_recently = (
        DeadMessage.objects.using(alias).filter(queue=selected, died_at__gte=now - RATE_WINDOW).count()
    )
    rate = net_drain_per_minute(points, since=now - RATE_WINDOW)
    return {
        "title": f"Queue dashboard: {selected}" if selected else "Queue dashboard",
        "subtitle": None,
        "queues": [
            {
                "sample": sample,
                "oldest": format_age(sample.oldest_ready_seconds),
                "selected": sample.queue == selected,
            }
            for sample in live
        ],
        "selected": selected,
        "current": current,
        "oldest_ready": format_age(current.oldest_ready_seconds) if current else "-",
        "net_drain": format_rate(rate),
        "died_recently": died_recently,
        "rate_minutes": int(RATE_WINDOW.total_seconds() // 60),
        "windows": WINDOWS,
        "minutes": minutes,
        "sample_count": len(history),
        "backlog_chart": backlog_chart(drawn),
        "drain_chart": drain_chart(drawn),
        "now": now,
    }


# ---------------------------------------------------------------------------------------
# Prometheus
# ---------------------------------------------------------------------------------------


class QueueCollector:
    """A prometheus-client collector of every queue's live figures (one SQL call per scrape)."""

    GAUGES = [
        ("lonnymq_ready_messages", "Messages ready to be released now.", "ready"),
        (
            "lonnymq_scheduled_messages",
            "Messages waiting for a future run time or a retry backoff.",
            "scheduled",
        ),
        ("lonnymq_in_flight_messages", "Messages leased by a worker.", "in_flight"),
        ("lonnymq_dead_messages", "Messages in the dead-letter table.", "dead"),
        ("lonnymq_channels", "Channels (tenants) of the queue.", "channels"),
        ("lonnymq_paused_channels", "Paused channels of the queue.", "paused_channels"),
    ]

    def __init__(self, using: str | None = None):
        self.using = using

    def collect(self) -> Any:
        from prometheus_client.core import GaugeMetricFamily

        samples = QueueSample.live(using=self.using)
        for name, documentation, attr in self.GAUGES:
            gauge = GaugeMetricFamily(name, documentation, labels=["queue"])
            for sample in samples:
                gauge.add_metric([sample.queue], getattr(sample, attr))
            yield gauge
        age = GaugeMetricFamily(
            "lonnymq_oldest_ready_age_seconds",
            "How long the most overdue ready message has been due (0 when none is ready).",
            labels=["queue"],
        )
        for sample in samples:
            age.add_metric([sample.queue], sample.oldest_ready_seconds or 0.0)
        yield age


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition of every queue's gauges. Needs the ``metrics`` extra
    (prometheus-client); protect the URL as you protect your other metrics endpoints."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    except ImportError:
        return HttpResponse(
            "prometheus-client is not installed: pip install 'django-lonnymq[metrics]'\n",
            status=501,
            content_type="text/plain; charset=utf-8",
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
