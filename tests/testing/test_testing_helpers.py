"""The helpers users call from their own tests (django_lonnymq.testing), called directly and
through the pytest plugin's fixtures."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from django.db import connection

from django_lonnymq import enqueue
from django_lonnymq.testing import assert_enqueued, assert_nothing_enqueued, drain

if TYPE_CHECKING:
    from django_lonnymq.pytest_plugin import Enqueued
    from django_lonnymq.worker import Stats

pytestmark = pytest.mark.django_db(transaction=True)


def test_assert_enqueued_matches_payload_and_count(recording: None) -> None:
    enqueue("t_record", {"kind": "welcome", "user": 1}, channel="acme")
    enqueue("t_record", {"kind": "welcome", "user": 2}, channel="acme")
    assert len(assert_enqueued("t_record", payload={"kind": "welcome"}, count=2)) == 2
    assert_enqueued("t_record", channel="acme", payload={"user": 2}, count=1)
    with pytest.raises(AssertionError, match="expected 3"):
        assert_enqueued("t_record", payload={"kind": "welcome"}, count=3)
    with pytest.raises(AssertionError, match="no message"):
        assert_enqueued("t_record", payload={"kind": "other"})


def test_drain_runs_handlers_and_empties_queue(recording: None) -> None:
    for i in range(5):
        enqueue("t_record", {"i": i}, channel=f"c{i % 2}")
    stats = drain("t_record")
    assert stats.acked == 5
    assert_nothing_enqueued("t_record")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM testapp_delivery WHERE event = 'done'")
        assert cursor.fetchone()[0] == 5


def test_the_same_through_the_pytest_fixtures(
    lonnymq_drain: Callable[..., Stats], lonnymq_enqueued: Enqueued, recording: None
) -> None:
    for i in range(5):
        enqueue("t_record", {"i": i}, channel=f"c{i % 2}")
    assert lonnymq_enqueued.payloads("t_record", channel="c1") == [{"i": 1}, {"i": 3}]
    lonnymq_enqueued.assert_enqueued("t_record", payload={"i": 4}, count=1)
    assert lonnymq_drain("t_record").acked == 5
    lonnymq_enqueued.assert_nothing_enqueued("t_record")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM testapp_delivery WHERE event = 'done'")
        assert cursor.fetchone()[0] == 5
