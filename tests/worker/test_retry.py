"""``Retry(delay)`` checks its delay where the handler raises it (issue: a bad delay killed the
handler thread inside the worker's ``except Retry`` branch)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from django_lonnymq import Retry
from django_lonnymq.exceptions import InvalidArgument


@pytest.mark.parametrize(
    "delay",
    [float("nan"), math.inf, -math.inf, "soon", None, True, -5, -0.001, 1e30, timedelta(days=-1),
     timedelta(days=36_526), [1]],
)  # fmt: skip
def test_a_bad_delay_is_refused_naming_the_field(delay):
    with pytest.raises(InvalidArgument) as caught:
        Retry(delay=delay)
    assert caught.value.field == "delay"
    assert "delay must" in str(caught.value)


@pytest.mark.parametrize(
    ("delay", "expected"),
    [(0, timedelta(0)), (0.25, timedelta(seconds=0.25)), (60, timedelta(minutes=1)),
     (timedelta(hours=2), timedelta(hours=2)), (timedelta(days=36_525), timedelta(days=36_525))],
)  # fmt: skip
def test_a_good_delay_is_kept_as_a_timedelta(delay, expected):
    assert Retry(delay=delay, reason="later").delay == expected
