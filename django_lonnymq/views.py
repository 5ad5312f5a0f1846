"""Operators' views: the dashboard's figures and charts (rendered by the Channel admin at
``admin/django_lonnymq/channel/dashboard/``) and the Prometheus ``metrics`` view.

The figures come from ``QueueSample.live()`` (exact, one SQL function call for all queues)
and the history from ``lonnymq_queue_sample`` rows that ``manage.py lonnymq_stats --record``
writes. Throughput is the rate of ``released_total`` (the sum of the queue's channels'
release counters) between samples. See docs/admin.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from .conf import settings
from .models import DeadMessage, QueueSample
from .urlparams import storable

# Dashboard windows (minutes) and the default one.
WINDOWS = [(15, "15 minutes"), (60, "1 hour"), (360, "6 hours"), (1440, "24 hours")]
DEFAULT_WINDOW = 60
# The rate figures (throughput, net drain, dead) look back this far.
RATE_WINDOW = timedelta(minutes=5)
# Most points drawn per line (longer histories are thinned evenly).
MAX_POINTS = 360

COLORS = {
    "depth": "#2f6fb0",
    "in_flight": "#e08a1e",
    "dead": "#b03a2e",
    "paused": "#8a8a3a",
    "drain": "#3c8f4a",
    "grow": "#b03a2e",
    "released": "#6a4fb0",
    "dropped": "#9a9a9a",
}


# ---------------------------------------------------------------------------------------
# Rates from samples
# ---------------------------------------------------------------------------------------


def backlog(sample: QueueSample) -> int:
    """Messages not yet done: waiting (ready, scheduled, paused) plus in flight.

    Paused messages belong to the backlog: pausing a channel moves its messages from ready
    to paused and must not read as the backlog draining."""
    return sample.backlog


def net_drain_per_minute(samples: Sequence[QueueSample], since: datetime) -> float | None:
    """How fast the backlog (ready + scheduled + in flight) shrank since ``since``, per minute.

    This is the processing rate minus the enqueue rate: it equals throughput while nothing is
    enqueued, and it is negative while the backlog grows, so it tells whether the workers keep
    up. (Throughput itself is :func:`throughput`, from the release counter.) None when fewer
    than two samples fall in the window.
    """
    window = [s for s in samples if s.at >= since]
    if len(window) < 2:
        return None
    minutes = (window[-1].at - window[0].at).total_seconds() / 60
    if minutes <= 0:
        return None
    return (backlog(window[0]) - backlog(window[-1])) / minutes


def released_between(a: QueueSample, b: QueueSample) -> tuple[int, bool]:
    """Messages released between two samples of a queue, and whether the counter's sum dropped.

    Each channel's ``released_total`` only grows, but the queue's sum loses a channel's count
    when the channel is deleted; a drop counts as 0 released (so the interval understates).
    """
    delta = b.released_total - a.released_total
    return max(delta, 0), delta < 0


@dataclass
class Throughput:
    """Messages released (leased to workers) between the first and last sample of a window."""

    released: int
    since: datetime
    until: datetime
    # True when the counter's sum dropped in some interval (a channel was deleted): that
    # interval counted as 0, so ``released`` understates it.
    dropped: bool

    @property
    def minutes(self) -> float:
        return (self.until - self.since).total_seconds() / 60

    @property
    def per_minute(self) -> float:
        return self.released / self.minutes


def throughput(samples: Sequence[QueueSample], since: datetime) -> Throughput | None:
    """Messages released from ``since`` to the last sample (samples in time order).

    Sums the clamped differences of ``released_total`` between consecutive samples, so one
    deleted channel costs only the interval it was deleted in. The counter counts releases
    (leases): a message retried or whose lease expired counts once per delivery. None when
    fewer than two samples fall in the window.
    """
    window = [s for s in samples if s.at >= since]
    if len(window) < 2 or window[-1].at <= window[0].at:
        return None
    released, dropped = 0, False
    for a, b in pairwise(window):
        n, fell = released_between(a, b)
        released += n
        dropped = dropped or fell
    return Throughput(released=released, since=window[0].at, until=window[-1].at, dropped=dropped)


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


def format_throughput(rate: float | None) -> str:
    """A rate that cannot be negative (messages per minute), unsigned."""
    if rate is None:
        return "-"
    return f"{rate:,.1f}" if rate < 100 else f"{rate:,.0f}"


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
    note: str = ""


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
    """Lines: depth (ready + scheduled), paused, in flight and dead over time."""
    if len(points) < 2:
        return None
    chart = Chart(title="Depth, paused, in flight and dead")
    series = [
        ("depth", "depth (ready + scheduled)"),
        ("paused", "paused"),
        ("in_flight", "in flight"),
        ("dead", "dead"),
    ]
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


def throughput_chart(points: Sequence[QueueSample]) -> Chart | None:
    """Bars: messages released per minute between consecutive samples (the counter's rate).

    An interval where the counter's sum dropped (a channel was deleted) is drawn as a grey
    stub and counts as 0.
    """
    if len(points) < 2:
        return None
    chart = Chart(title="Throughput: messages released per minute", height=160, bottom=132)
    rates = []
    for a, b in pairwise(points):
        minutes = (b.at - a.at).total_seconds() / 60
        if minutes > 0:
            released, dropped = released_between(a, b)
            rates.append((a, b, released / minutes, dropped))
    if not rates:
        return None
    start, end = points[0].at.timestamp(), points[-1].at.timestamp()
    span = max(end - start, 1e-3)
    top_value = nice_ceiling(max(rate for _, _, rate, _ in rates))
    height = chart.bottom - chart.top

    def x(at: datetime) -> float:
        return chart.left + (at.timestamp() - start) / span * (chart.right - chart.left)

    any_dropped = False
    for a, b, rate, dropped in rates:
        x0, x1 = x(a.at), x(b.at)
        bar_height = 3.0 if dropped else rate / top_value * height
        at = f"{timezone.localtime(b.at):%H:%M:%S}"
        chart.bars.append(
            {
                "x": round(x0 + 0.5, 1),
                "width": round(max(x1 - x0 - 1, 1), 1),
                "y": round(chart.bottom - max(bar_height, 0.5), 1),
                "height": round(max(bar_height, 0.5), 1),
                "color": COLORS["dropped"] if dropped else COLORS["released"],
                "title": (
                    f"the counter's sum dropped by {a.released_total - b.released_total:,} at {at} "
                    "(a channel was deleted): counted as 0"
                    if dropped
                    else f"{format_throughput(rate)} per minute at {at}"
                ),
            }
        )
        any_dropped = any_dropped or dropped
    for i in range(5):
        value = top_value * i / 4
        chart.y_ticks.append(
            {"y": round(chart.bottom - value / top_value * height, 1), "label": _label(value)}
        )
    chart.zero_y = chart.bottom
    chart.legend = [{"color": COLORS["released"], "label": "released (leased) per minute"}]
    if any_dropped:
        chart.legend.append({"color": COLORS["dropped"], "label": "counter dropped: counted as 0"})
        chart.note = (
            "Grey: the queue's released count fell between two samples because a channel was "
            "deleted (its count left the sum). Those intervals count as 0, so they understate."
        )
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
    asked = request.GET.get("queue")
    selected = (storable(asked) or "") if asked else (names[0] if names else "")
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
    recent = throughput(points, since=now - RATE_WINDOW)
    in_window = throughput(points, since=now - timedelta(minutes=minutes))
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
        "throughput": format_throughput(recent.per_minute if recent else None),
        "released_recently": recent.released if recent else None,
        "released_since": recent.since if recent else None,
        "released_in_window": in_window.released if in_window else None,
        "released_dropped": bool(in_window and in_window.dropped),
        "died_recently": died_recently,
        "rate_minutes": int(RATE_WINDOW.total_seconds() // 60),
        "windows": WINDOWS,
        "minutes": minutes,
        "sample_count": len(history),
        "backlog_chart": backlog_chart(drawn),
        "throughput_chart": throughput_chart(drawn),
        "drain_chart": drain_chart(drawn),
        "now": now,
    }


# ---------------------------------------------------------------------------------------
# Prometheus
# ---------------------------------------------------------------------------------------


class QueueCollector:
    """A prometheus-client collector of every queue's live figures (one SQL call per scrape)."""

    GAUGES = [
        ("lonnymq_ready_messages", "Messages ready to be released now (paused channels apart).", "ready"),
        (
            "lonnymq_scheduled_messages",
            "Messages waiting for a future run time or a retry backoff.",
            "scheduled",
        ),
        (
            "lonnymq_paused_messages",
            "Messages waiting in paused channels (not ready, not scheduled).",
            "paused",
        ),
        ("lonnymq_in_flight_messages", "Messages leased by a worker.", "in_flight"),
        ("lonnymq_dead_messages", "Messages in the dead-letter table.", "dead"),
        ("lonnymq_channels", "Channels (tenants) of the queue.", "channels"),
        ("lonnymq_paused_channels", "Paused channels of the queue.", "paused_channels"),
    ]

    def __init__(self, using: str | None = None):
        self.using = using

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        samples = QueueSample.live(using=self.using)
        for name, documentation, attr in self.GAUGES:
            gauge = GaugeMetricFamily(name, documentation, labels=["queue"])
            for sample in samples:
                gauge.add_metric([sample.queue], getattr(sample, attr))
            yield gauge
        age = GaugeMetricFamily(
            "lonnymq_oldest_ready_age_seconds",
            "How long the most overdue ready message has been due (0 when none is ready; paused "
            "channels do not count).",
            labels=["queue"],
        )
        for sample in samples:
            age.add_metric([sample.queue], sample.oldest_ready_seconds or 0.0)
        yield age
        live = _live_workers(self.using)
        workers = GaugeMetricFamily(
            "lonnymq_live_workers",
            "Live workers serving the queue (not stopped, heard from within LONNYMQ_WORKER_LOST_AFTER).",
            labels=["queue"],
        )
        for queue in sorted({sample.queue for sample in samples} | set(live)):
            workers.add_metric([queue], live.get(queue, 0))
        yield workers
        # Exposed as lonnymq_released_total. The sum falls when a channel is deleted, which
        # Prometheus reads as a counter reset (see docs/admin.md).
        released = CounterMetricFamily(
            "lonnymq_released_total",
            "Messages released (leased) to workers, ever: once per delivery, so a retried "
            "message counts once per attempt.",
            labels=["queue"],
        )
        for sample in samples:
            released.add_metric([sample.queue], sample.released_total)
        yield released


def _live_workers(using: str | None) -> dict[str, int]:
    """Live workers per queue they serve, from the workers' rows (docs/admin.md, Workers)."""
    from django.db import connections

    from . import sql
    from .conf import lost_after

    with connections[using or settings.DATABASE].cursor() as cursor:
        cursor.execute(sql.query("live_workers"), {"lost_after_s": lost_after().total_seconds()})
        return {queue: int(n) for queue, n in cursor.fetchall()}


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition of every queue's gauges and release counter. Needs the ``metrics`` extra
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
