"""``@handler(queue, batch=N, batch_wait=...)`` and ``BatchFailed`` refuse bad input with a
typed error naming the field, the rule and the value, before anything is registered."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from django_lonnymq import BatchFailed, handler
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.registry import BatchSpec, _batches, _handlers, batch_of


@pytest.fixture(autouse=True)
def _forget():
    before, batches = dict(_handlers), dict(_batches)
    yield
    _handlers.clear()
    _handlers.update(before)
    _batches.clear()
    _batches.update(batches)


def test_a_batch_handler_is_registered_with_its_size_and_wait():
    @handler("unit_batch", batch=50, batch_wait=timedelta(milliseconds=250))
    def take(messages):  # type: ignore[no-untyped-def]
        return None

    assert batch_of("unit_batch") == BatchSpec(50, 0.25)
    handler("unit_batch_default", batch=3)(take)
    assert batch_of("unit_batch_default") == BatchSpec(3, 1.0)  # the documented default wait
    # Registered again without batch=, it takes one message per call again.
    handler("unit_batch")(take)
    assert batch_of("unit_batch") is None


@pytest.mark.parametrize(
    ("kwargs", "field", "rule"),
    [
        ({"batch": 0}, "batch", "must be between 1 and 1000"),
        ({"batch": 1001}, "batch", "must be between 1 and 1000"),
        ({"batch": -5}, "batch", "must be between 1 and 1000"),
        ({"batch": 2.5}, "batch", "must be an integer"),
        ({"batch": True}, "batch", "must be an integer"),
        ({"batch": "50"}, "batch", "must be an integer"),
        ({"batch": 10, "batch_wait": -1}, "batch_wait", "must not be negative"),
        ({"batch": 10, "batch_wait": math.nan}, "batch_wait", "must be finite"),
        ({"batch": 10, "batch_wait": 301}, "batch_wait", "must be at most 5 minutes"),
        ({"batch": 10, "batch_wait": timedelta(minutes=6)}, "batch_wait", "must be at most 5 minutes"),
        ({"batch": 10, "batch_wait": "1s"}, "batch_wait", "must be a timedelta or a number of seconds"),
        ({"batch_wait": 1}, "batch_wait", "needs batch=N"),
    ],
)
def test_bad_batch_arguments_are_refused_before_anything_is_registered(kwargs, field, rule):
    with pytest.raises(InvalidArgument, match=rule) as caught:
        handler("unit_bad_batch", **kwargs)
    assert caught.value.field == field
    assert "unit_bad_batch" not in _handlers and "unit_bad_batch" not in _batches


@pytest.mark.parametrize(
    ("failures", "rule"),
    [
        ({}, "must be a non-empty mapping"),
        ([1, 2], "must be a non-empty mapping"),
        ({"7": RuntimeError()}, "keys must be messages or message ids"),
        ({True: RuntimeError()}, "keys must be messages or message ids"),
        ({7: 42}, "values must be exceptions or texts"),
    ],
)
def test_batch_failed_checks_its_mapping_where_the_handler_raises_it(failures, rule):
    with pytest.raises(InvalidArgument, match=rule) as caught:
        BatchFailed(failures)
    assert caught.value.field == "failures"
