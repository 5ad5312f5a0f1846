"""Workflows through real workers on the real database: a diamond's fan-in sees both outputs
and runs once; a rolled-back start runs nothing; a failing step fails the workflow, its
requeue resumes it; cancelling a running workflow; the invariants hold (api.check)."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_lonnymq import Workflow, api, chain, chord
from django_lonnymq.workflows import requeue_failed_steps
from tests.worker.conftest import describe, wait_until


def state(workflow_id: int) -> str:
    return api.workflow(workflow_id).state


def test_diamond_runs_the_fan_in_once_after_both_parents_with_both_outputs(spawn, db):
    with transaction.atomic():
        flow = Workflow("diamond", channel="tenant-1")
        a = flow.step("w_step", {}, name="a")
        b = flow.step("w_step", {"seconds": 0.2}, name="b", after=[a])
        c = flow.step("w_step", {}, name="c", after=[a])
        flow.step("w_step", {}, name="d", after=[b, c])
        workflow_id = flow.start()
        # Waiting steps are not in the message table: only a is.
        assert [m["id"] for m in db.messages("w_step")] == []  # not committed yet
    assert [m["id"] for m in db.messages("w_step")] == [a_id := api.workflow(workflow_id).step("a").id]

    worker = spawn("--queue", "w_step", "--concurrency", "4")
    wait_until(lambda: state(workflow_id) == "succeeded", 20, "the diamond to succeed", worker)
    runs = db.rows("SELECT message_id, payload, at FROM testapp_delivery WHERE queue = 'w_step' ORDER BY id")
    by_step = {r["payload"]["step"]: r for r in runs}
    assert sorted(r["payload"]["step"] for r in runs) == ["a", "b", "c", "d"], runs
    d = by_step["d"]
    assert d["at"] > by_step["b"]["at"] and d["at"] > by_step["c"]["at"]
    assert d["payload"]["parents"] == {
        "b": {"name": "b", "seen": ["a"]},
        "c": {"name": "c", "seen": ["a"]},
    }
    assert d["payload"]["workflow"] == workflow_id
    assert by_step["a"]["message_id"] == a_id
    info = api.workflow(workflow_id)
    assert [(s.name, s.state) for s in info.steps] == [(n, "succeeded") for n in "abcd"]
    assert info.step("d").output == {"name": "d", "seen": ["b", "c"]}
    assert info.finished_at is not None and info.remaining == 0
    assert db.scalar("SELECT array_agg(releases ORDER BY id) FROM lonnymq_workflow_step") == [1, 1, 1, 1]
    assert worker.stop() == 0, describe(worker)
    assert api.check() == []


def test_a_rolled_back_start_runs_nothing(spawn, db):
    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        flow = Workflow("rolled back")
        chain(flow, ("w_step", {}), ("w_step", {}))
        flow.start()
        raise Rollback
    assert db.scalar("SELECT count(*) FROM lonnymq_workflow") == 0
    assert db.messages("w_step") == []
    worker = spawn("--queue", "w_step", "--burst")
    assert worker.wait(20) == 0, describe(worker)
    assert db.events("done", "w_step") == []


def test_a_dead_step_fails_the_workflow_and_its_requeue_resumes_it(spawn, db):
    flow = Workflow("flaky", channel="tenant-2")
    first = flow.step("w_step", {}, name="first")
    flaky = flow.step("w_flaky", {}, name="flaky", after=[first], max_attempts=1)
    side = flow.step("w_step", {}, name="side", after=[first])
    chord(flow, [flaky, side], {"queue": "w_step", "payload": {}, "name": "last"})
    flow.on_failure("w_failed", {"why": "flaky"})
    workflow_id = flow.start()

    worker = spawn("--queue", "w_step", "--queue", "w_flaky", "--queue", "w_failed")
    wait_until(lambda: state(workflow_id) == "failed", 20, "the workflow to fail", worker)
    # The independent branch finishes; the dead step's descendant never runs.
    wait_until(lambda: api.workflow(workflow_id).step("side").state == "succeeded", 20, "side", worker)
    wait_until(lambda: db.events("on_failure", "w_failed"), 20, "the on_failure message", worker)
    info = api.workflow(workflow_id)
    assert info.step("flaky").state == "dead" and info.step("last").state == "waiting"
    [failed] = db.events("on_failure", "w_failed")
    assert failed["payload"]["workflow"] == workflow_id
    assert api.check() == []

    db.rows("INSERT INTO testapp_inflight (channel) VALUES ('w_flaky_ok')")
    assert requeue_failed_steps(workflow_id) == [info.step("flaky").id]
    assert state(workflow_id) == "running"
    wait_until(lambda: state(workflow_id) == "succeeded", 20, "the resumed workflow to succeed", worker)
    last = [e for e in db.events("done", "w_step") if e["payload"]["step"] == "last"]
    assert len(last) == 1 and last[0]["payload"]["parents"] == {
        "flaky": "fixed",
        "side": {"name": "side", "seen": ["first"]},
    }
    # on_failure ran once.
    assert len(db.events("on_failure", "w_failed")) == 1
    assert worker.stop() == 0, describe(worker)
    assert api.check() == []


def test_cancelling_a_running_workflow(spawn, db):
    flow = Workflow("to cancel")
    slow = flow.step("w_slow", {}, name="slow")
    other = flow.step("w_step", {}, name="queued", delay=60)  # queued, not due
    flow.step("w_step", {}, name="after", after=[slow, other])
    workflow_id = flow.start()

    worker = spawn("--queue", "w_slow", "--queue", "w_step")
    wait_until(lambda: db.events("start", "w_slow"), 20, "the slow step to start", worker)
    assert api.workflow(workflow_id).step("slow").state == "running"
    assert api.cancel_workflow(workflow_id) == 1
    assert state(workflow_id) == "cancelled"
    wait_until(lambda: db.events("stopped", "w_slow"), 20, "the slow step to see the cancel", worker)
    wait_until(
        lambda: api.workflow(workflow_id).step("slow").state == "cancelled", 20, "the slow step to end", worker
    )
    info = api.workflow(workflow_id)
    assert [(s.name, s.state) for s in info.steps] == [
        ("slow", "cancelled"),
        ("queued", "cancelled"),
        ("after", "cancelled"),
    ]
    assert db.messages("w_step") == []
    assert [d["reason"] for d in db.dead("w_slow")] == ["cancelled"]
    assert api.cancel_workflow(workflow_id) == 0  # again: nothing to do
    assert worker.stop() == 0, describe(worker)
    assert api.check() == []


def test_fairness_a_tenant_with_one_workflow_finishes_before_a_busy_one_does_a_tenth(spawn, db):
    with transaction.atomic():
        for n in range(500):
            flow = Workflow(f"a-{n}", channel="tenant-a")
            chain(flow, *[("w_step", {"n": n, "i": i}) for i in range(5)])
            flow.start()
    flow = Workflow("b", channel="tenant-b")
    chain(flow, *[("w_step", {"i": i}) for i in range(5)])
    b_id = flow.start()

    worker = spawn("--queue", "w_step", "--concurrency", "4")
    wait_until(lambda: state(b_id) == "succeeded", 60, "tenant B's workflow to succeed", worker)
    a_done = db.scalar(
        "SELECT count(*) FROM lonnymq_workflow_step s JOIN lonnymq_workflow w ON w.id = s.workflow_id"
        " WHERE w.channel = 'tenant-a' AND s.state = 'succeeded'"
    )
    assert a_done < 250, f"tenant A had {a_done} of 2,500 steps done when B's 5 were"
    assert worker.stop() == 0, describe(worker)
    db.rows("DELETE FROM lonnymq_message")


def test_django_tasks_as_steps_under_real_workers(spawn, db):
    """Task steps run through the task backend's handler on their queues: each result ends
    SUCCESSFUL with the return value, which is the step's output; a task child reads its
    parents' outputs with parent_outputs(), a plain child in message.parent_outputs. A task
    step that fails for good ends its result FAILED and fails the workflow."""
    from django_lonnymq.models import TaskResultRecord
    from tests.testapp import tasks

    flow = Workflow("tasks", channel="tenant-t")
    a = flow.step(tasks.add, args=[2, 3])
    b = flow.step(tasks.note, args=["hi"])  # on queue tasks_other
    total = flow.step(tasks.total_of_parents, kwargs={"extra": 1}, after=[a, b])
    flow.step("w_step", {}, name="plain", after=[total])
    workflow_id = flow.start()
    failing = Workflow("failing")
    boom = failing.step(tasks.explode, kwargs={"times": 2})  # the backend's MAX_ATTEMPTS: 2
    failing.step(tasks.add, args=[1, 1], after=[boom])
    failing_id = failing.start()

    worker = spawn("--queue", "default", "--queue", "tasks_other", "--queue", "w_step")
    wait_until(lambda: state(workflow_id) == "succeeded", 30, "the task workflow to succeed", worker)
    wait_until(lambda: state(failing_id) == "failed", 30, "the failing workflow to fail", worker)
    info = api.workflow(workflow_id)
    assert [(s.name, s.output) for s in info.steps] == [
        ("add", 5), ("note", "HI"), ("total_of_parents", 6), ("plain", {"name": "plain", "seen": ["total_of_parents"]})
    ]  # fmt: skip
    for step in info.steps[:3]:
        result = TaskResultRecord.objects.get(message_id=step.id)
        assert (result.status, result.return_value) == ("SUCCESSFUL", step.output)
        assert result.channel == "tenant-t" and result.finished_at is not None
    [plain] = [e for e in db.events("done", "w_step") if e["payload"]["workflow"] == workflow_id]
    assert plain["payload"]["parents"] == {"total_of_parents": 6}

    failed = api.workflow(failing_id)
    assert [s.state for s in failed.steps] == ["dead", "waiting"]
    result = TaskResultRecord.objects.get(message_id=failed.steps[0].id)
    assert result.status == "FAILED" and len(result.errors) == 2 and "exploded 2" in result.errors[-1]["traceback"]
    assert TaskResultRecord.objects.get(message_id=failed.steps[1].id).status == "READY"  # a requeue could run it
    api.cancel_workflow(failing_id)
    ended = TaskResultRecord.objects.get(message_id=failed.steps[1].id)
    assert ended.status == "FAILED" and ended.errors[-1]["exception_class_path"].endswith("WorkflowCancelled")
    assert worker.stop() == 0, describe(worker)
    assert api.check() == []
