"""The dashboard's charts, drawn on the server: coordinates of SVG lines, bars and axes for
the dashboard template, from a queue's samples. Pure drawing: no query, no request."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Any

from django.utils import timezone

from ..figures import backlog, format_rate, format_throughput, released_between
from ..models import QueueSample

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
