"""The task queues under a real ``run_queue_worker``: a second stop signal exits at once,
``--queue '*'`` serves every task queue, ``"QUEUES": []`` accepts any queue name."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from django_lonnymq import api
from django_lonnymq.models import TaskResultRecord
from tests.testapp import tasks
from tests.worker.conftest import describe, wait_until

OPEN_QUEUES = "tests.worker.settings_open_task_queues"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_second_signal_exits_at_once_and_fails_the_running_task(spawn: Any, db: Any, sig: int) -> None:
    running = tasks.sleeps.enqueue(60)
    waiting = [tasks.add.enqueue(n, n) for n in range(2)]
    worker = spawn(
        "--queue", "default", "--concurrency", "1", "--batch-size", "3", "--lease", "3s",
        "--shutdown-timeout", "120s",
    )  # fmt: skip
    wait_until(lambda: db.events("task start"), 20, "the task to start", worker)
    wait_until(lambda: len(db.messages("default")) == 3 and all(m["lease_until"] for m in db.messages("default")),
               10, "the three messages to be leased", worker)  # fmt: skip
    worker.signal(sig)
    worker.wait_for_line("send it again to exit at once", timeout=10)
    time.sleep(0.5)
    assert worker.alive(), f"the first signal should wait for the running task\n{describe(worker)}"
    signalled = time.monotonic()
    worker.signal(sig)
    code = worker.wait(timeout=20)
    took = time.monotonic() - signalled

    assert code == 1, describe(worker)
    assert took < 10, f"took {took:.1f}s to exit\n{describe(worker)}"
    record = TaskResultRecord.objects.get(id=running.id)
    assert record.status == "FAILED" and record.finished_at is not None, describe(worker)
    assert [e["exception_class_path"] for e in record.errors] == ["django_lonnymq.exceptions.WorkerInterrupted"]
    # What never started went back at once, its attempt uncounted, its result untouched.
    for result in waiting:
        assert TaskResultRecord.objects.get(id=result.id).status == "READY"
    messages = {m["payload"]["result_id"]: m for m in db.messages("default")}
    assert set(messages) == {running.id, *(r.id for r in waiting)}
    for result in waiting:
        assert messages[result.id]["lease_until"] is None and messages[result.id]["attempts"] == 0
    # The running task's message comes back through its lease (at least once).
    assert messages[running.id]["lease_until"] is not None and messages[running.id]["attempts"] == 1
    wait_until(
        lambda: api.reap() or db.messages("default")[0]["lease_until"] is None,
        15,
        "the abandoned lease to be reaped",
        worker,
    )
    assert all(m["lease_until"] is None for m in db.messages("default"))
    assert db.channel("default")["in_flight"] == 0


def test_star_serves_every_task_queue(spawn: Any, db: Any) -> None:
    first = tasks.add.enqueue(1, 2)
    second = tasks.note.enqueue("hi", tenant_id="acme")
    worker = spawn("--queue", "*", "--burst")
    assert worker.wait(timeout=30) == 0, describe(worker)
    assert "queues=default,tasks_other " in worker.output, describe(worker)
    first.refresh()
    second.refresh()
    assert (first.return_value, second.return_value) == (3, "HI")


def test_star_without_a_task_backend_is_a_command_error(spawn: Any, db: Any) -> None:
    worker = spawn("--queue", "*", "--burst", settings="tests.worker.settings_no_tasks")
    assert worker.wait(timeout=30) == 1
    assert "no LonnyMQBackend is configured" in worker.output, describe(worker)


def test_empty_queues_accepts_any_queue_name(spawn: Any, db: Any, settings: Any) -> None:
    settings.TASKS = {
        "default": {"BACKEND": "django_lonnymq.tasks.LonnyMQBackend", "QUEUES": [], "OPTIONS": {"MAX_ATTEMPTS": 2}}
    }
    reports = tasks.add.using(queue_name="t_open_tasks").enqueue(20, 22)
    plain = tasks.add.enqueue(1, 1)
    named = spawn("--queue", "t_open_tasks", "--burst", settings=OPEN_QUEUES)
    assert named.wait(timeout=30) == 0, describe(named)
    reports.refresh()
    assert reports.status == "SUCCESSFUL", f"{reports.status} {reports.errors}\n{describe(named)}"
    assert reports.return_value == 42
    # '*' takes the queues the database holds (and 'default'), except those with own handlers.
    api.enqueue("t_record", {"n": 1})
    star = spawn("--queue", "*", "--burst", settings=OPEN_QUEUES, label="star worker")
    assert star.wait(timeout=30) == 0, describe(star)
    assert "queues=default,t_open_tasks " in star.output, describe(star)
    plain.refresh()
    assert plain.return_value == 2
    assert len(db.messages("t_record")) == 1  # a handler's own queue is left to its workers
