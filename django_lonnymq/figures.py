"""A queue's figures over time: throughput and net drain from recorded samples, and how the
figures print. The dashboard (:mod:`django_lonnymq.admin.dashboard`) and ``manage.py
lonnymq_stats`` share them.

Throughput is the rate of ``released_total`` (the sum of the queue's channels' release
counters) between samples; the samples are ``lonnymq_queue_sample`` rows (see docs/admin.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

from .models import QueueSample

# The rate figures (throughput, net drain, dead) look back this far.
RATE_WINDOW = timedelta(minutes=5)


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
