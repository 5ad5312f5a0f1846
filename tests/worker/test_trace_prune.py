"""Workers drop the trace contexts of messages that are gone, and keep the others."""

from __future__ import annotations

import pytest
from django.db import connection

from django_lonnymq import api
from django_lonnymq.registry import autodiscover
from django_lonnymq.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_workers_tick_drops_trace_contexts_of_gone_messages(caplog: pytest.LogCaptureFixture) -> None:
    kept = api.enqueue("t_record", {"n": 1})
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO lonnymq_trace (message_id, context, created_at) VALUES"
            " (%s, '{}', now() - interval '2 minutes'), (%s, '{}', now() - interval '2 minutes'),"
            " (%s, '{}', now())",
            [kept, kept + 1000, kept + 1001],
        )
    autodiscover()
    worker = Worker(["t_record"])
    worker.connection.ensure()
    try:
        worker.observers.tick()
    finally:
        worker.connection.close()
    with connection.cursor() as cursor:
        cursor.execute("SELECT message_id FROM lonnymq_trace ORDER BY message_id")
        left = [row[0] for row in cursor.fetchall()]
    # The queued message keeps its context; a gone one's is dropped once older than a minute.
    assert left == [kept, kept + 1001]
    assert "could not" not in caplog.text
