"""lonnymq.E200: a worker shows as lost only after several heartbeats of silence."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

from tests.checks.test_checks import ids, lonnymq_errors


@pytest.mark.parametrize(
    ("beat", "lost"), [(5, 9), (timedelta(seconds=10), timedelta(seconds=15)), (1, 1)]
)
def test_e200_lost_after_shorter_than_two_heartbeats(beat, lost):
    with override_settings(LONNYMQ_WORKER_HEARTBEAT=beat, LONNYMQ_WORKER_LOST_AFTER=lost):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E200"]
    assert "LONNYMQ_WORKER_LOST_AFTER" in errors[0].msg and "twice" in errors[0].msg


@pytest.mark.parametrize(("beat", "lost"), [(5, 10), (0.5, 2), (timedelta(seconds=5), timedelta(seconds=30))])
def test_e200_accepts_two_heartbeats_or_more(beat, lost):
    with override_settings(LONNYMQ_WORKER_HEARTBEAT=beat, LONNYMQ_WORKER_LOST_AFTER=lost):
        assert lonnymq_errors() == []


def test_e200_leaves_a_malformed_duration_to_e002():
    with override_settings(LONNYMQ_WORKER_HEARTBEAT="soon"):
        assert ids(lonnymq_errors()) == ["lonnymq.E002"]
