"""Pausing a whole queue (api.pause_queue / resume_queue, lonnymq_pause_queue_v1): a paused
queue's dequeues release nothing while its other neighbours flow, writes still land, and
the queue's row lives only as long as it holds a limit or the pause."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from django_lonnymq import api, enqueue
from django_lonnymq.db import rows
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.models import Message, QueueConfig

pytestmark = pytest.mark.django_db


def dequeue(queue: str, n: int = 10) -> list[int]:
    params = {"queue": queue, "batch_size": n, "lease_ms": 30_000, "worker": "t", "tolerance_ms": 50}
    return [row[0] for row in rows("dequeue", params)]


def test_a_paused_queue_releases_nothing_and_its_neighbour_flows():
    paused = [enqueue("t_pq_a", {"n": i}, channel=f"c{i}") for i in range(3)]
    other = [enqueue("t_pq_b", {"n": i}) for i in range(2)]
    assert api.pause_queue("t_pq_a") is True
    assert api.pause_queue("t_pq_a") is False  # already paused: nothing changes
    assert dequeue("t_pq_a") == []
    assert sorted(dequeue("t_pq_b")) == sorted(other)
    # Writes still land while it is paused.
    later = enqueue("t_pq_a", {"n": "later"})
    assert Message.objects.filter(id__in=[*paused, later], lease_until__isnull=True).count() == 4
    assert api.resume_queue("t_pq_a") is True
    assert api.resume_queue("t_pq_a") is False
    assert sorted(dequeue("t_pq_a")) == sorted([*paused, later])


def test_publish_still_writes_into_a_paused_queue():
    from django_lonnymq import publish
    from django_lonnymq.models import Subscription

    Subscription.objects.create(topic="t_pq.topic", queue="t_pq_sub")
    api.pause_queue("t_pq_sub")
    ids = publish("t_pq.topic", {"n": 1}, key="k")
    assert len(ids) == 1 and Message.objects.filter(id__in=ids).exists()
    assert dequeue("t_pq_sub") == []
    api.resume_queue("t_pq_sub")
    assert dequeue("t_pq_sub") == ids


def test_the_row_holds_the_pause_alone_and_goes_when_resumed_without_limits():
    api.pause_queue("t_pq_row")
    row = QueueConfig.objects.get(queue="t_pq_row")
    assert row.paused and row.max_concurrency is None and row.rate_count is None
    api.resume_queue("t_pq_row")
    assert not QueueConfig.objects.filter(queue="t_pq_row").exists()


def test_pause_and_limits_live_together():
    api.configure_queue("t_pq_lim", max_concurrency=2)
    api.pause_queue("t_pq_lim")
    # Removing the last limit of a paused queue keeps the row (the pause) and says no limit.
    assert api.configure_queue("t_pq_lim", max_concurrency=None) is False
    assert QueueConfig.objects.get(queue="t_pq_lim").paused
    assert api.configure_queue("t_pq_lim", max_concurrency=1) is True
    api.resume_queue("t_pq_lim")
    row = QueueConfig.objects.get(queue="t_pq_lim")  # kept: it still holds the cap
    assert not row.paused and row.max_concurrency == 1
    ids = [enqueue("t_pq_lim", {"n": i}, channel=f"c{i}") for i in range(3)]
    assert len(dequeue("t_pq_lim")) == 1 and set(dequeue("t_pq_lim")) <= set(ids)


@pytest.mark.parametrize("bad", ["", "   ", "x" * 101, "a\x00b", None, 7])
def test_an_invalid_queue_name_is_refused_and_nothing_is_written(bad):
    for call in (api.pause_queue, api.resume_queue):
        with pytest.raises(InvalidArgument) as caught:
            call(bad)
        assert caught.value.field == "queue"
    assert not QueueConfig.objects.exists()


def test_the_sql_function_refuses_a_bad_name_and_a_null_state():
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        rows("pause_queue", {"queue": " ", "paused": True})
    assert caught.value.field == "queue"
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        rows("pause_queue", {"queue": "t_pq_null", "paused": None})
    assert caught.value.field == "paused"
    assert not QueueConfig.objects.exists()


def test_the_command_pauses_resumes_and_shows_state(capsys):
    call_command("lonnymq_queue", "pause", "t_pq_cmd", "t_pq_cmd2")
    call_command("lonnymq_queue", "status")
    out = capsys.readouterr().out
    assert "t_pq_cmd: paused" in out and "t_pq_cmd2: paused" in out
    call_command("lonnymq_queue", "resume", "t_pq_cmd")
    call_command("lonnymq_queue", "status", "t_pq_cmd", "t_pq_cmd2")
    out = capsys.readouterr().out
    assert "t_pq_cmd: running" in out and "t_pq_cmd2: paused" in out
    with pytest.raises(CommandError, match="queue"):
        call_command("lonnymq_queue", "pause", "t_pq_ok", " ")
    assert not QueueConfig.objects.filter(queue="t_pq_ok").exists()  # nothing written


def test_a_paused_queue_backlog_rings_no_alarm():
    from django_lonnymq import alarms

    enqueue("t_pq_alarm", {"n": 1})
    api.pause_queue("t_pq_alarm")
    assert alarms.paused_queues() == {"t_pq_alarm"}
    assert [a for a in alarms.current() if a.queue == "t_pq_alarm"] == []
    api.resume_queue("t_pq_alarm")
    # The control: the same backlog, running and served by no live worker, rings.
    assert [a.kind for a in alarms.current() if a.queue == "t_pq_alarm"] == [alarms.UNSERVED]


def test_metrics_show_the_paused_queue():
    pytest.importorskip("prometheus_client")
    from django.test import RequestFactory

    from django_lonnymq.prometheus import metrics

    enqueue("t_pq_metrics", {"n": 1})
    enqueue("t_pq_running", {"n": 1})
    api.pause_queue("t_pq_metrics")
    text = metrics(RequestFactory().get("/metrics")).content.decode()
    assert 'lonnymq_queue_paused{queue="t_pq_metrics"} 1.0' in text
    assert 'lonnymq_queue_paused{queue="t_pq_running"} 0.0' in text
