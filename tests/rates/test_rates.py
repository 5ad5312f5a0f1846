"""Rates read from text: numbers past every bound (a period of 10**300 days, a count of 5,000
digits) are refused with InvalidArgument naming the part, never a bare OverflowError or
ValueError."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.rates import Rate

HUGE = "9" * 300


@pytest.mark.parametrize(
    ("text", "field", "rule"),
    [
        (f"1 / {HUGE} d", "rate.period", "must be at most 366 days"),
        (f"1 / {HUGE} ms", "rate.period", "must be at most 366 days"),
        (f"1 / {'9' * 400} ms", "rate.period", "must be at most 366 days"),
        (f"1 / {HUGE}.5 h", "rate.period", "must be at most 366 days"),
        (f"{'9' * 5000} / s", "rate.count", "must be between 1 and 1000000"),
        (f"1 / s, burst {'9' * 5000}", "rate.burst", "must be between 1 and 1000000"),
        (f"{'0' * 5000}1 / s", "rate.count", None),  # leading zeros: the number is 1
    ],
    ids=["period-days", "period-ms", "period-inf", "period-fraction", "count-5000-digits",
         "burst-5000-digits", "count-leading-zeros"],
)  # fmt: skip
def test_huge_numbers_in_rate_text_are_refused_naming_the_part(text, field, rule):
    if rule is None:
        assert Rate.parse(text) == Rate(1, timedelta(seconds=1))
        return
    with pytest.raises(InvalidArgument) as caught:
        Rate.parse(text)
    assert caught.value.field == field and caught.value.rule == rule
    assert str(caught.value).startswith(f"{field} {rule}")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"count": 10**5000, "period": timedelta(seconds=1)}, "rate.count"),
        ({"count": 1, "period": timedelta(seconds=1), "burst": -(10**5000)}, "rate.burst"),
    ],
    ids=["count", "burst"],
)
def test_a_rate_of_huge_integers_is_refused_naming_the_part(kwargs, field):
    with pytest.raises(InvalidArgument) as caught:
        Rate(**kwargs)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field} must be between 1 and 1000000, got an integer of")
