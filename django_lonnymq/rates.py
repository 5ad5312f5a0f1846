"""Rates as "N per period, burst B" (a token bucket), written and read in human units.

``Rate(100, timedelta(minutes=1), burst=20)`` and ``Rate.parse("100 / min, burst 20")`` are
the same limit: at most ``burst + count * t / period`` releases in any window of length t.
Used by :func:`django_lonnymq.api.configure_channel`, ``configure_queue`` and the admin.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from . import bounds
from .exceptions import InvalidArgument

MAX_COUNT = bounds.MAX_RATE_COUNT
MAX_BURST = bounds.MAX_RATE_BURST
# A period is at most 366 days, as a release interval (bounds.MAX_INTERVAL).
MAX_PERIOD = bounds.MAX_INTERVAL

_UNITS = {
    "ms": 1,
    "s": 1000, "sec": 1000, "second": 1000, "seconds": 1000,
    "min": 60_000, "minute": 60_000, "minutes": 60_000, "m": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}  # fmt: skip
_TEXT = re.compile(
    r"^\s*(?P<count>\d+)\s*(?:/|per)\s*(?P<amount>\d+(?:\.\d+)?)?\s*(?P<unit>[a-z]+)\s*"
    r"(?:,\s*burst\s*(?P<burst>\d+)\s*)?$",
    re.IGNORECASE,
)
# How a period is written back: the largest unit that divides it.
_NAMES = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000), ("ms", 1))


@dataclass(frozen=True)
class Rate:
    """``count`` releases per ``period``, with bursts of up to ``burst`` (default 1: none)."""

    count: int
    period: timedelta
    burst: int = 1

    def __post_init__(self) -> None:
        check(self.count, self.period, self.burst)

    @property
    def period_ms(self) -> int:
        return round(self.period / timedelta(milliseconds=1))

    @classmethod
    def parse(cls, text: Any, field: str = "rate") -> Rate:
        """``"100 / min, burst 20"``, ``"10/s"``, ``"5 per 2 hours, burst 5"``."""
        if not isinstance(text, str):
            raise InvalidArgument(field, 'must be a Rate or text such as "100 / min, burst 20"', text)
        match = _TEXT.match(text)
        if match is None or match["unit"].lower() not in _UNITS:
            raise InvalidArgument(
                field, 'must read "N / period[, burst B]", e.g. "100 / min, burst 20" or "10 / 2 s"', text
            )
        amount = float(match["amount"]) if match["amount"] else 1.0
        period_ms = amount * _UNITS[match["unit"].lower()]
        # Bounded before a timedelta is made of it: 10**300 days overflows one.
        if not math.isfinite(period_ms) or period_ms > MAX_PERIOD / timedelta(milliseconds=1):
            raise InvalidArgument(f"{field}.period", "must be at most 366 days", text)
        if period_ms != int(period_ms):
            raise InvalidArgument(f"{field}.period", "must be a whole number of milliseconds", text)
        count = _bounded(match["count"], f"{field}.count", MAX_COUNT, text)
        burst = _bounded(match["burst"], f"{field}.burst", MAX_BURST, text) if match["burst"] else 1
        return cls(count, timedelta(milliseconds=int(period_ms)), burst)

    @classmethod
    def of(cls, value: Any, field: str = "rate") -> Rate:
        """A Rate from a Rate or its text."""
        return value if isinstance(value, Rate) else cls.parse(value, field)

    @classmethod
    def from_ms(cls, count: int | None, period_ms: int | None, burst: int | None) -> Rate | None:
        """The Rate stored in a row's columns, or None."""
        if count is None or period_ms is None or burst is None:
            return None
        return cls(count, timedelta(milliseconds=period_ms), burst)

    def __str__(self) -> str:
        ms = self.period_ms
        for name, size in _NAMES:
            if ms % size == 0:
                amount = ms // size
                period = name if amount == 1 else f"{amount} {name}"
                break
        return f"{self.count} / {period}" + (f", burst {self.burst}" if self.burst != 1 else "")


def _bounded(digits: str, field: str, most: int, text: str) -> int:
    """A count or burst of the text, refused past ``most`` before Python reads it (a number of
    more than 4,300 digits is a ValueError of its own)."""
    digits = digits.lstrip("0") or "0"
    if len(digits) > len(str(most)):
        raise InvalidArgument(field, f"must be between 1 and {most}", text)
    return int(digits)


def check(count: Any, period: Any, burst: Any, field: str = "rate") -> None:
    """Refuse a rate Python or the schema would not keep (InvalidArgument naming the part)."""
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidArgument(f"{field}.count", "must be an integer", count)
    if not 1 <= count <= MAX_COUNT:
        raise InvalidArgument(f"{field}.count", f"must be between 1 and {MAX_COUNT}", count)
    if not isinstance(period, timedelta):
        raise InvalidArgument(f"{field}.period", "must be a timedelta", period)
    if period < timedelta(milliseconds=1):
        raise InvalidArgument(f"{field}.period", "must be at least 1 ms", period)
    if period > MAX_PERIOD:
        raise InvalidArgument(f"{field}.period", "must be at most 366 days", period)
    if period % timedelta(milliseconds=1):
        raise InvalidArgument(f"{field}.period", "must be a whole number of milliseconds", period)
    if isinstance(burst, bool) or not isinstance(burst, int):
        raise InvalidArgument(f"{field}.burst", "must be an integer", burst)
    if not 1 <= burst <= MAX_BURST:
        raise InvalidArgument(f"{field}.burst", f"must be between 1 and {MAX_BURST}", burst)
