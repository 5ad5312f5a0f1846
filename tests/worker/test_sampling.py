"""Workers record the dashboard's history themselves (no cron), one at a time: samples are
at least an interval apart however many workers run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from itertools import pairwise
from typing import Any

import psycopg
import pytest
from django.test import Client
from django.urls import reverse

from django_lonnymq import sql
from django_lonnymq.api import Item, enqueue_many
from tests.worker.conftest import describe, wait_until

DASHBOARD = reverse("admin:django_lonnymq_channel_dashboard")
SETTINGS = "tests.worker.settings_sampling"


def test_dashboard_has_history_after_three_intervals_without_cron(spawn, db, admin_client: Client):
    enqueue_many("t_sleep", [Item({"seconds": 30}, channel=f"c{n}") for n in range(3)])  # stays in flight
    workers = [
        spawn("--queue", "t_sleep", "--concurrency", "2", settings=SETTINGS, label=f"w{n}") for n in range(3)
    ]

    def samples() -> list[dict[str, Any]]:
        return db.rows("SELECT at, in_flight FROM lonnymq_queue_sample WHERE queue = 't_sleep' ORDER BY at")

    wait_until(lambda: len(samples()) >= 4, 30, "four samples", *workers)
    response = admin_client.get(DASHBOARD, {"queue": "t_sleep", "minutes": "15"})
    for worker in workers:
        worker.stop(timeout=60, sig=9)
    assert response.status_code == 200
    assert response.context["sample_count"] >= 3, describe(*workers)
    assert response.context["backlog_chart"] is not None
    assert '<svg class="lq-chart"' in response.content.decode()
    found = samples()
    # Three workers tried every quarter second; no two samples of the queue are closer than
    # the interval (the database's clock stamps them).
    gaps = [b["at"] - a["at"] for a, b in pairwise(found)]
    assert min(gaps) >= timedelta(seconds=1), (gaps, describe(*workers))
    assert max(s["in_flight"] for s in found) >= 1


@pytest.mark.django_db(transaction=True)
def test_one_recorder_at_a_time_and_never_a_sample_too_soon(
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    enqueue_many("t_record", [Item({"n": 1})])
    first, second = connect(autocommit=False), connect()
    call = sql.query("record_samples_due")
    params = {"interval_ms": 60_000, "keep_ms": 86_400_000, "cap": 100_000}
    assert first.execute(call, params).fetchone()[0] >= 1  # records, and holds the lock
    assert second.execute(call, params).fetchone()[0] == 0  # lock taken: records nothing
    first.commit()
    assert second.execute(call, params).fetchone()[0] == 0  # a sample newer than the interval
    count = second.execute("SELECT count(*) FROM lonnymq_queue_sample WHERE queue = 't_record'").fetchone()[0]
    assert count == 1
