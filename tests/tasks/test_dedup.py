"""Dedup keys for Django Tasks (``django_lonnymq.tasks.dedup``, docs/tasks.md): each mode, a
running message, bad input, eager mode, and the one-result-per-message rule."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_lonnymq import testing
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.models import Message, TaskResultRecord
from django_lonnymq.tasks import dedup
from tests.harness.helpers import ack, assert_healthy, dequeue, rows
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)


def assert_one_result_per_message() -> None:
    """Every task message has exactly one result row, the one its payload names, and every
    READY result has its message: nothing is left READY with no message to run it."""
    assert (
        rows(
            """SELECT m.id, m.payload->>'result_id' AS named, array_agg(r.id) AS results
             FROM lonnymq_message m LEFT JOIN lonnymq_task_result r ON r.message_id = m.id
            WHERE m.payload ? 'result_id'
            GROUP BY m.id HAVING count(r.id) <> 1 OR bool_or(r.id IS DISTINCT FROM m.payload->>'result_id')"""
        )
        == []
    )
    assert (
        rows(
            """SELECT r.id, r.message_id FROM lonnymq_task_result r
            WHERE r.status = 'READY' AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.id = r.message_id)"""
        )
        == []
    )
    assert_healthy()


def test_skip_returns_the_key_s_result_and_writes_nothing() -> None:
    with dedup("sum-1"):
        first = tasks.add.enqueue(1, 2)
        again = tasks.add.enqueue(3, 4)
    assert again.id == first.id and again.args == [1, 2]
    assert Message.objects.count() == 1 and TaskResultRecord.objects.count() == 1
    testing.drain("default")
    with dedup("sum-1"):  # the key stands for its window, even after the task ran
        after = tasks.add.enqueue(5, 6)
    assert after.id == first.id and after.status == "SUCCESSFUL" and after.return_value == 3
    assert Message.objects.count() == 0 and TaskResultRecord.objects.count() == 1
    assert tasks.add.get_result(first.id).return_value == 3
    assert_one_result_per_message()


def test_replace_changes_the_waiting_message_and_its_result() -> None:
    soon = timezone.now() + timedelta(seconds=30)
    later = timezone.now() + timedelta(minutes=5)
    with dedup("sum-2", on_duplicate="replace"):
        first = tasks.add.using(run_after=soon).enqueue(1, 2)
        second = tasks.add.using(run_after=later).enqueue(10, 20)
    assert second.id == first.id and second.args == [10, 20] and second.status == "READY"
    message = Message.objects.get()
    row = TaskResultRecord.objects.get()
    assert message.payload["args"] == [10, 20] and message.payload["result_id"] == first.id
    assert row.args == [10, 20] and row.run_after == later and row.message_id == message.id
    assert message.dequeue_at >= int(later.timestamp() * 1000) - 1
    assert tasks.add.get_result(first.id).args == [10, 20]
    assert_one_result_per_message()


def test_update_changes_the_arguments_and_keeps_the_run_time() -> None:
    soon = timezone.now() + timedelta(seconds=30)
    with dedup("sum-3", on_duplicate="update"):
        first = tasks.add.using(run_after=soon).enqueue(1, 2)
        due = Message.objects.get().dequeue_at
        second = tasks.add.enqueue(7, 8)
    assert second.id == first.id and second.args == [7, 8]
    message = Message.objects.get()
    assert message.dequeue_at == due and message.payload["args"] == [7, 8]
    row = TaskResultRecord.objects.get()
    assert row.args == [7, 8] and row.run_after == soon
    assert_one_result_per_message()


def test_a_replaced_task_runs_once_with_the_last_arguments() -> None:
    with dedup("sum-4", on_duplicate="replace"):
        results = [tasks.add.enqueue(i, i) for i in range(5)]
    assert len({r.id for r in results}) == 1
    testing.drain("default")
    final = tasks.add.get_result(results[0].id)
    assert final.status == "SUCCESSFUL" and final.return_value == 8
    assert TaskResultRecord.objects.count() == 1
    assert_one_result_per_message()


@pytest.mark.parametrize("mode", ["replace", "update"])
def test_a_running_message_is_untouched_and_one_new_message_waits(mode: str) -> None:
    with dedup("sum-5", on_duplicate=mode):
        first = tasks.add.enqueue(1, 1)
    (leased,) = dequeue("default")  # a worker holds its lease
    with dedup("sum-5", on_duplicate=mode):
        second = tasks.add.enqueue(2, 2)
        third = tasks.add.enqueue(3, 3)
    assert second.id != first.id and third.id == second.id and third.args == [3, 3]
    running = Message.objects.get(id=leased["id"])
    assert running.payload["args"] == [1, 1] and running.payload["result_id"] == first.id
    assert TaskResultRecord.objects.get(id=first.id).args == [1, 1]
    waiting = Message.objects.exclude(id=leased["id"]).get()
    assert waiting.payload["result_id"] == second.id and waiting.payload["args"] == [3, 3]
    assert TaskResultRecord.objects.get(id=second.id).message_id == waiting.id
    assert_one_result_per_message()
    ack([leased])
    testing.drain("default")
    assert tasks.add.get_result(second.id).return_value == 6
    assert TaskResultRecord.objects.get(id=first.id).status == "READY"  # acked by hand, never run
    assert Message.objects.count() == 0


def test_a_finished_message_is_followed_by_a_new_one() -> None:
    with dedup("sum-6", on_duplicate="replace"):
        first = tasks.add.enqueue(1, 1)
    testing.drain("default")
    with dedup("sum-6", on_duplicate="replace"):
        second = tasks.add.enqueue(2, 2)
    assert second.id != first.id and second.status == "READY"
    assert tasks.add.get_result(first.id).return_value == 2
    assert TaskResultRecord.objects.get(id=second.id).message_id == Message.objects.get().id
    assert_one_result_per_message()


def test_skip_returns_the_result_of_a_running_task_with_its_status() -> None:
    with dedup("sum-7"):
        first = tasks.add.enqueue(1, 1)
    TaskResultRecord.objects.filter(id=first.id).update(status="RUNNING")
    with dedup("sum-7"):
        again = tasks.add.enqueue(9, 9)
    assert again.id == first.id and again.status == "RUNNING" and again.args == [1, 1]


def test_keys_are_per_channel_and_the_block_applies_to_each_enqueue() -> None:
    from django_lonnymq.tasks import channel

    with dedup("k", on_duplicate="replace"):
        with channel("a"):
            a = tasks.note.enqueue("one")
        with channel("b"):
            b = tasks.note.enqueue("two")
        with channel("a"):
            a2 = tasks.note.enqueue("three")
    assert a.id == a2.id != b.id
    assert sorted(r.channel for r in TaskResultRecord.objects.all()) == ["a", "b"]


def test_the_keyed_enqueue_is_one_statement() -> None:
    connection.ensure_connection()
    with dedup("one-call", on_duplicate="update"), CaptureQueriesContext(connection) as queries:
        tasks.add.enqueue(1, 2)
        tasks.add.enqueue(3, 4)
    assert len(queries.captured_queries) == 2
    assert all("lonnymq_enqueue_task_keyed_v1" in q["sql"] for q in queries.captured_queries)


def test_a_rolled_back_enqueue_writes_nothing() -> None:
    with pytest.raises(RuntimeError), transaction.atomic(), dedup("gone", on_duplicate="replace"):
        tasks.add.enqueue(1, 2)
        raise RuntimeError
    assert Message.objects.count() == 0 and TaskResultRecord.objects.count() == 0
    assert rows("SELECT 1 FROM lonnymq_dedup") == []


def test_replace_inside_the_creating_transaction() -> None:
    with transaction.atomic(), dedup("tx", on_duplicate="replace"):
        first = tasks.add.enqueue(1, 2)
        second = tasks.add.enqueue(3, 4)
    assert first.id == second.id
    assert TaskResultRecord.objects.get().args == [3, 4]
    assert_one_result_per_message()


@pytest.mark.parametrize(
    ("key", "mode", "field"),
    [
        (None, "skip", "dedup_key"),
        (42, "skip", "dedup_key"),
        ("", "skip", "dedup_key"),
        ("a\x00b", "skip", "dedup_key"),
        ("x" * 201, "skip", "dedup_key"),
        ("lonnymq.tick", "skip", "dedup_key"),
        ("ok", "debounce", "on_duplicate"),
        ("ok", None, "on_duplicate"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(key: Any, mode: Any, field: str) -> None:
    with pytest.raises(InvalidArgument) as caught, dedup(key, on_duplicate=mode):
        tasks.add.enqueue(1, 2)
    assert caught.value.field == field
    assert Message.objects.count() == 0 and TaskResultRecord.objects.count() == 0


def test_skip_to_a_plain_message_of_the_key_is_refused() -> None:
    from django_lonnymq import enqueue

    enqueue("default", {"plain": True}, dedup_key="shared")
    with pytest.raises(InvalidArgument) as caught, dedup("shared"):
        tasks.add.enqueue(1, 2)
    assert caught.value.field == "dedup_key"
    assert TaskResultRecord.objects.count() == 0 and Message.objects.count() == 1


def test_replace_of_a_plain_waiting_message_makes_it_this_task() -> None:
    from django_lonnymq import enqueue

    message_id = enqueue("default", {"plain": True}, dedup_key="shared2")
    with dedup("shared2", on_duplicate="replace"):
        result = tasks.add.enqueue(1, 2)
    assert Message.objects.get().id == message_id
    assert TaskResultRecord.objects.get(id=result.id).message_id == message_id
    assert_one_result_per_message()


def test_aenqueue_takes_the_block_s_key() -> None:
    async def both() -> tuple[Any, Any]:
        try:
            with dedup("async", on_duplicate="replace"):
                first = await tasks.add.aenqueue(1, 2)
                second = await tasks.add.aenqueue(3, 4)
            return first, second
        finally:  # the connection of the thread sync_to_async ran them on
            await sync_to_async(connections.close_all)()

    first, second = asyncio.run(both())
    assert first.id == second.id and second.args == [3, 4]
    assert TaskResultRecord.objects.get().args == [3, 4]


def test_enqueued_signal_for_writes_not_for_skips() -> None:
    from django_lonnymq.tasks import _task_signals

    seen: list[str] = []

    def record(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append(task_result.id)

    _task_signals.task_enqueued.connect(record)
    try:
        with dedup("sig", on_duplicate="update"):
            first = tasks.add.enqueue(1, 2)
            tasks.add.enqueue(3, 4)
        with dedup("sig"):
            tasks.add.enqueue(5, 6)
    finally:
        _task_signals.task_enqueued.disconnect(record)
    assert seen == [first.id, first.id]


def test_eager_mode_runs_the_last_arguments_at_commit() -> None:
    with testing.eager():
        with transaction.atomic(), dedup("eager", on_duplicate="replace"):
            first = tasks.add.enqueue(1, 2)
            tasks.add.enqueue(10, 20)
        assert tasks.add.get_result(first.id).return_value == 30
        with dedup("eager"):
            skipped = tasks.add.enqueue(5, 5)
    assert skipped.id == first.id and skipped.return_value == 30
    assert Message.objects.count() == 0 and TaskResultRecord.objects.count() == 1


def test_a_task_running_in_a_worker_is_untouched_and_the_next_one_runs_after_it(recording: None) -> None:
    """A real worker runs the key's task while newer enqueues replace: they make one new
    message, which runs after with the last arguments; each message has its own result."""
    with dedup("slow", on_duplicate="replace"):
        first = tasks.sleeps.enqueue(1.0)
    worker = threading.Thread(target=lambda: (testing.drain("default"), connections.close_all()))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while not rows("SELECT 1 FROM testapp_delivery WHERE event = 'task start'"):
            assert time.monotonic() < deadline, "the worker never started the task"
            time.sleep(0.02)
        with dedup("slow", on_duplicate="replace"):
            second = tasks.sleeps.enqueue(0.1)
            third = tasks.sleeps.enqueue(0.2)
        assert TaskResultRecord.objects.get(id=first.id).status == "RUNNING"
        assert_one_result_per_message()
    finally:
        worker.join(timeout=60)
    testing.drain("default")  # in case the worker's drain ended before the new message came
    assert second.id == third.id != first.id
    done = {r.id: r for r in TaskResultRecord.objects.all()}
    assert set(done) == {first.id, second.id}
    assert (done[first.id].status, done[first.id].args) == ("SUCCESSFUL", [1.0])
    assert (done[second.id].status, done[second.id].args) == ("SUCCESSFUL", [0.2])
    started = [
        r["payload"]
        for r in rows("SELECT payload FROM testapp_delivery WHERE event = 'task start' ORDER BY id")
    ]
    assert started == [1.0, 0.2]
    assert Message.objects.count() == 0


def _together(threads: int, work: Any) -> list[Any]:
    """``work(index)`` on ``threads`` threads started at one moment, each on its own Django
    connection and in its own transaction."""
    barrier = threading.Barrier(threads, timeout=10)
    results: list[Any] = [None] * threads

    def body(index: int) -> None:
        try:
            barrier.wait()
            with transaction.atomic():
                results[index] = work(index)
        except Exception as exc:  # reported by the test
            results[index] = exc
        finally:
            connections.close_all()

    started = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in started), "a producer hung (deadlock?)"
    assert [r for r in results if isinstance(r, Exception)] == []
    return results


@pytest.mark.parametrize("mode", ["skip", "replace", "update"])
def test_concurrent_producers_leave_one_message_and_one_result(mode: str) -> None:
    for round_ in range(4):
        key = f"together-{round_}"

        def produce(index: int, key: str = key, round_: int = round_) -> Any:
            with dedup(key, on_duplicate=mode):
                return tasks.add.enqueue(index, round_)

        results = _together(6, produce)
        assert len({r.id for r in results}) == 1
        (message,) = Message.objects.filter(dedup_key=key)
        (row,) = TaskResultRecord.objects.filter(message_id=message.id)
        assert row.id == results[0].id and message.payload["args"] == row.args
        if mode != "skip":  # the payload of one of the producers, kept whole
            assert row.args in [[i, round_] for i in range(6)]
    assert_one_result_per_message()


def test_concurrent_producers_while_a_worker_leases_never_leave_two_waiting_messages() -> None:
    """Producers replace one key while a consumer leases and acks it: every message has one
    result, a READY result always has its message, and the key never has two waiting
    messages."""
    stop = threading.Event()
    leased_args: list[Any] = []

    def consume() -> None:
        try:
            while not stop.is_set():
                got = dequeue("default", batch=10)
                for row in got:
                    leased_args.append(row["payload"]["args"])
                    TaskResultRecord.objects.filter(id=row["payload"]["result_id"]).update(
                        status="SUCCESSFUL"
                    )
                if got:
                    ack(got)
                time.sleep(0.005)
        finally:
            connections.close_all()

    consumer = threading.Thread(target=consume)
    consumer.start()
    try:
        for round_ in range(6):

            def produce(index: int, round_: int = round_) -> Any:
                with dedup("busy", on_duplicate="replace"):
                    return tasks.add.enqueue(round_, index)

            _together(5, produce)
            waiting = Message.objects.filter(dedup_key="busy", lease_until__isnull=True).count()
            assert waiting <= 1
    finally:
        stop.set()
        consumer.join(timeout=30)
    assert_one_result_per_message()
    ready = TaskResultRecord.objects.filter(status="READY")
    assert ready.count() == Message.objects.filter(dedup_key="busy").count() <= 1
    assert TaskResultRecord.objects.filter(status="SUCCESSFUL").count() == len(leased_args)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"dedup_key": None}, "dedup_key"),
        ({"dedup_key": ""}, "dedup_key"),
        ({"on_duplicate": "debounce"}, "on_duplicate"),
        ({"on_duplicate": None}, "on_duplicate"),
        ({"payload": '{"task": "t", "backend": "default", "args": [], "kwargs": {}}'}, "payload.result_id"),
        ({"max_attempts": 0}, "max_attempts"),
    ],
)
def test_the_sql_function_refuses_bad_input_on_its_own(overrides: dict[str, Any], field: str) -> None:
    from django_lonnymq import db
    from django_lonnymq.conf import enqueue_params

    params = {
        "queue": "default",
        "channel": "default",
        "payload": '{"task": "tests.testapp.tasks.add", "result_id": "r1", "backend": "default",'
        ' "args": [1, 2], "kwargs": {}}',
        "run_at_ms": None,
        "priority": 0,
        "max_attempts": 3,
        "run_after": None,
        "enqueued_at": timezone.now(),
        "dedup_key": "k",
        "on_duplicate": "replace",
        **enqueue_params(),
        **overrides,
    }
    with pytest.raises(InvalidArgument) as caught:
        db.models(TaskResultRecord, "enqueue_task_keyed", params)
    assert caught.value.field == field
    assert rows("SELECT 1 FROM lonnymq_message UNION ALL SELECT 1 FROM lonnymq_task_result") == []
    assert rows("SELECT 1 FROM lonnymq_dedup UNION ALL SELECT 1 FROM lonnymq_channel") == []
