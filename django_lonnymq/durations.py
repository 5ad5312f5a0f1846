"""Durations given by callers, checked: a number of seconds or a timedelta, finite, bounded.

Used by the API, ``Message.extend_lease()`` and ``Retry`` alike (the bounds are in
:mod:`django_lonnymq.bounds`).
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from . import bounds
from .exceptions import InvalidArgument


def to_ms(value: timedelta | float | int) -> int:
    """A duration as whole milliseconds."""
    if isinstance(value, timedelta):
        return value // timedelta(milliseconds=1)
    return round(float(value) * 1000)


def duration_ms(field: str, value: Any, most: timedelta = bounds.MAX_AHEAD) -> int:
    if isinstance(value, bool) or not isinstance(value, (timedelta, int, float)):
        raise InvalidArgument(field, "must be a timedelta or a number of seconds", value)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgument(field, "must be finite", value)
    if value > most if isinstance(value, timedelta) else value > most.total_seconds():
        raise InvalidArgument(field, f"must be at most {human(most)}", value)
    ms = to_ms(value)
    if ms < 0:
        raise InvalidArgument(field, "must not be negative", value)
    return ms


def human(duration: timedelta) -> str:
    days = duration.days
    return f"{days // 365} years" if days >= 3650 else f"{days} days" if days > 1 else "1 day"
