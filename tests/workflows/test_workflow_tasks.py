"""Django Tasks as workflow steps, on the real database (eager mode runs them in-process; the
acceptance tests run them under real workers): the step's message is a task message with a
result row written in the start's transaction; the task's return value is the step's output;
a task child reads its parents' outputs with ``workflows.parent_outputs()``; bad input is a
typed error before anything is written; cancelling ends the results of the steps that never
ran; a queued step's message cancelled with ``api.cancel`` reads as a cancelled step."""

from __future__ import annotations

import importlib.util

import pytest
from django.db import connection, transaction
from django.test import override_settings

from django_lonnymq import Workflow, api
from django_lonnymq.exceptions import InvalidArgument, PayloadError
from django_lonnymq.models import DeadMessage, TaskResultRecord
from django_lonnymq.models import Message as MessageRow
from django_lonnymq.tasks import channel as task_channel
from django_lonnymq.testing import eager
from django_lonnymq.workflows import cancel_workflow, parent_outputs
from tests.testapp import tasks

pytestmark = pytest.mark.django_db

DUMMY = (
    "django.tasks.backends.dummy.DummyBackend"
    if importlib.util.find_spec("django.tasks")
    else "django_tasks.backends.dummy.DummyBackend"
)


def count(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")
        return cursor.fetchone()[0]


def refused(field: str, rule: str, build) -> None:
    with pytest.raises(InvalidArgument) as raised:
        build()
    assert raised.value.field == field and rule in str(raised.value), raised.value
    for table in ("lonnymq_workflow", "lonnymq_workflow_step", "lonnymq_message", "lonnymq_task_result"):
        assert count(table) == 0, table


def test_a_task_step_is_a_task_message_with_its_result_row_written_with_the_start():
    flow = Workflow("tasks", channel="tenant-1")
    add = flow.step(tasks.add, args=[2, 3])
    other = flow.step(tasks.add, args=(10,), kwargs={"b": 20}, name="more", max_attempts=4)
    total = flow.step(tasks.total_of_parents, kwargs={"extra": 1}, after=[add, other])
    noted = flow.step(tasks.note, args=["hi"], kwargs={"tenant_id": "acme"}, after=[total])
    assert [s.name for s in flow.steps] == ["add", "more", "total_of_parents", "note"]
    assert (add.queue, add.channel, add.max_attempts) == (
        "default",
        "tenant-1",
        2,
    )  # the backend's MAX_ATTEMPTS
    assert other.max_attempts == 4
    assert (noted.queue, noted.channel) == ("tasks_other", "acme")  # CHANNEL_KWARG, as for enqueue
    with transaction.atomic():
        workflow_id = flow.start()
        steps = {s.name: s for s in api.workflow(workflow_id).steps}
        results = {r.message_id: r for r in TaskResultRecord.objects.all()}
    assert sorted(results) == sorted(s.id for s in steps.values())
    for step in flow.steps:
        row = results[steps[step.name].id]
        assert (row.status, row.task_path, row.queue, row.channel, row.backend) == (
            "READY", step.task["task_path"], step.queue, step.channel, "default"
        )  # fmt: skip
    assert results[steps["more"].id].args == [10] and results[steps["more"].id].kwargs == {"b": 20}
    # The roots are in the message table, as task messages; the others wait.
    messages = {m.id: m.payload for m in MessageRow.objects.all()}
    assert sorted(messages) == sorted([steps["add"].id, steps["more"].id])
    assert messages[steps["add"].id]["task"] == "tests.testapp.tasks.add"
    assert messages[steps["add"].id]["result_id"] == results[steps["add"].id].id


def test_in_eager_mode_the_tasks_run_their_results_end_successful_and_outputs_flow():
    flow = Workflow("tasks")
    a = flow.step(tasks.add, args=[2, 3])
    b = flow.step(tasks.add, args=[10, 20])
    flow.step(tasks.total_of_parents, kwargs={"extra": 1}, after=[a, b])
    with eager():
        workflow_id = flow.start()
    info = api.workflow(workflow_id)
    assert info.state == "succeeded"
    assert [(s.name, s.state, s.output) for s in info.steps] == [
        ("add", "succeeded", 5), ("add.2", "succeeded", 30), ("total_of_parents", "succeeded", 36)
    ]  # fmt: skip
    for step in info.steps:
        result = TaskResultRecord.objects.get(message_id=step.id)
        assert result.status == "SUCCESSFUL" and result.return_value == step.output
        assert tasks.add.get_backend().get_result(result.id).return_value == step.output
    assert parent_outputs() == {}  # outside a step


def test_cancelling_ends_the_results_of_the_task_steps_that_never_ran():
    flow = Workflow("tasks")
    root = flow.step(tasks.add, args=[1, 2], delay=3600)
    flow.step(tasks.add, args=[3, 4], after=[root])
    flow.step("wt_plain", {}, after=[root])
    workflow_id = flow.start()
    assert cancel_workflow(workflow_id) == 0
    info = api.workflow(workflow_id)
    assert info.state == "cancelled" and [s.state for s in info.steps] == ["cancelled"] * 3
    results = TaskResultRecord.objects.order_by("message_id")
    assert [r.status for r in results] == ["FAILED", "FAILED"]
    assert all(r.errors[-1]["exception_class_path"].endswith("WorkflowCancelled") for r in results)


def test_a_tasks_channel_block_and_the_steps_own_channel():
    flow = Workflow("tasks", channel="tenant-1")
    with task_channel("blocked"):
        blocked = flow.step(tasks.add, args=[1, 2])
    own = flow.step(tasks.add, args=[1, 2], channel="mine")
    assert (blocked.channel, own.channel) == ("blocked", "mine")
    assert Workflow("no channel").step(tasks.add, args=[1, 2]).channel == "default"  # DEFAULT_CHANNEL


def test_bad_task_steps_are_refused_before_anything_is_written():
    flow = Workflow("bad")
    refused("payload", "must not be given for a Django Task step", lambda: flow.step(tasks.add, {"a": 1}))
    refused("args", "must be given only for a Django Task step", lambda: flow.step("q", {}, args=[1]))
    refused("kwargs", "must be given only for a Django Task step", lambda: flow.step("q", {}, kwargs={}))
    refused("payload", "must be given for a queue's step", lambda: flow.step("q"))
    refused("queue", "must be a queue name or a Django Task", lambda: flow.step(print))
    refused("args", "must be a list or a tuple", lambda: flow.step(tasks.add, args="12"))
    refused("kwargs", "must be a dict", lambda: flow.step(tasks.add, kwargs=[("a", 1)]))
    refused(
        "priority",
        "must be 0 for a task run as a workflow step",
        lambda: flow.step(tasks.add.using(priority=5)),
    )
    with pytest.raises(PayloadError):
        flow.step(tasks.add, args=[{1, 2}, 3])
    other = tasks.note.using(queue_name="tasks_other")
    with override_settings(
        TASKS={
            "default": {"BACKEND": "django_lonnymq.tasks.LonnyMQBackend", "QUEUES": ["default"]},
            "dummy": {"BACKEND": DUMMY, "QUEUES": []},
        }
    ):
        refused(
            "queue_name",
            "must be one of the QUEUES of task backend 'default'",
            lambda: flow.step(other, args=["x"]),
        )
        refused(
            "backend",
            "must be a LonnyMQBackend in TASKS",
            lambda: flow.step(tasks.add.using(backend="dummy")),
        )
    pinned = Workflow("pinned", using="default")
    with override_settings(LONNYMQ_QUEUE_DATABASES={"default": "other"}):
        refused(
            "using",
            "must be the database of task queue 'default'",
            lambda: pinned.step(tasks.add, args=[1, 2]),
        )
    assert flow.steps == [] and pinned.steps == []


def test_api_cancel_of_a_waiting_step_fails_its_workflow_as_a_dead_step_does():
    flow = Workflow("plain")
    first = flow.step("wt_plain", {}, delay=3600)
    flow.step("wt_plain", {}, after=[first])
    workflow_id = flow.start()
    step_id = api.workflow(workflow_id).step("wt_plain").id
    assert api.cancel([step_id]) == [step_id]
    assert [s.state for s in api.workflow(workflow_id).steps] == ["dead", "waiting"]
    assert api.workflow(workflow_id).state == "failed"
    assert DeadMessage.objects.get(id=step_id).reason == "cancelled"
    cancel_workflow(workflow_id)
    assert api.workflow(workflow_id).state == "cancelled"


def test_in_eager_mode_a_failing_task_step_fails_the_workflow_and_ends_its_result_failed():
    flow = Workflow("tasks")
    boom = flow.step(tasks.explode, kwargs={"times": 2})  # the backend's MAX_ATTEMPTS: 2
    flow.step(tasks.add, args=[1, 1], after=[boom])
    with eager():
        workflow_id = flow.start()
    info = api.workflow(workflow_id)
    assert info.state == "failed" and [s.state for s in info.steps] == ["dead", "waiting"]
    failed = TaskResultRecord.objects.get(message_id=info.steps[0].id)
    assert failed.status == "FAILED" and failed.finished_at is not None
    assert [e["exception_class_path"] for e in failed.errors] == ["builtins.ValueError"] * 2
    assert "exploded 2" in failed.errors[-1]["traceback"]
    assert TaskResultRecord.objects.get(message_id=info.steps[1].id).status == "READY"


def test_in_eager_mode_a_failing_tasks_own_writes_go_and_its_result_stays():
    from django_lonnymq.models import Channel

    with eager():
        result = tasks.writes_then_fails.enqueue("eager-task-write")
    record = TaskResultRecord.objects.get(id=result.id)
    assert record.status == "FAILED" and len(record.errors) == 2
    assert not Channel.objects.filter(name="eager-task-write").exists()  # the task's write rolled back
