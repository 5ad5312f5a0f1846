"""Workflows in eager mode: ``flow.start()`` runs the steps in-process, in dependency order,
where a real commit would be; each step sees its parents' outputs, a dead step fails the
workflow (its descendants wait, ``on_failure`` runs once), ``requeue_failed_steps`` resumes
it, and ``api.workflow`` reads the states the real SQL functions stored."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import override_settings

from django_lonnymq import Message, Workflow, api, chain, handler
from django_lonnymq.models import DeadMessage
from django_lonnymq.testing import eager
from django_lonnymq.workflows import requeue_failed_steps

RUNS: list[tuple[str, object]] = []
BROKEN: set[str] = set()


@handler("eager_wf")
def step(message: Message) -> dict[str, object]:
    """Records its run; fails while its name is in BROKEN; its output is its name and the
    parents' outputs it saw."""
    RUNS.append((message.step_name or "?", message.parent_outputs))
    if message.step_name in BROKEN:
        raise RuntimeError(f"{message.step_name} is broken")
    return {"name": message.step_name, "n": message.payload.get("n", 0)}


@handler("eager_wf_failed")
def failed(message: Message) -> None:
    RUNS.append(("on_failure", message.workflow_id))


@pytest.fixture(autouse=True)
def _runs():
    RUNS.clear()
    BROKEN.clear()
    yield
    RUNS.clear()
    BROKEN.clear()


def diamond(name: str = "diamond") -> Workflow:
    flow = Workflow(name, channel="tenant-1")
    a = flow.step("eager_wf", {"n": 1}, name="a")
    b = flow.step("eager_wf", {"n": 2}, name="b", after=[a], max_attempts=2)
    c = flow.step("eager_wf", {"n": 3}, name="c", after=[a], delay=3600)  # eager mode does not wait
    flow.step("eager_wf", {}, name="d", after=[b, c])
    return flow


@pytest.mark.django_db
def test_in_a_testcase_the_steps_have_run_in_order_when_start_returns():
    with eager():
        workflow_id = diamond().start()
    assert [name for name, _ in RUNS] == ["a", "b", "c", "d"]
    outputs = dict(RUNS)
    assert outputs["a"] == {}
    assert outputs["b"] == outputs["c"] == {"a": {"name": "a", "n": 1}}
    assert outputs["d"] == {"b": {"name": "b", "n": 2}, "c": {"name": "c", "n": 3}}
    info = api.workflow(workflow_id)
    assert info.state == "succeeded" and info.remaining == 0 and info.finished_at is not None
    assert [(s.name, s.state) for s in info.steps] == [(n, "succeeded") for n in "abcd"]
    assert info.step("d").output == {"name": "d", "n": 0}
    assert api.check() == []


@pytest.mark.django_db
@override_settings(LONNYMQ_EAGER=True)
def test_inside_the_codes_atomic_block_they_run_at_its_exit_and_a_rollback_runs_nothing():
    with transaction.atomic():
        flow = Workflow("chain")
        chain(flow, ("eager_wf", {"n": 1}), ("eager_wf", {"n": 2}))
        workflow_id = flow.start()
        assert RUNS == []  # not before the "commit"
    assert [name for name, _ in RUNS] == ["eager_wf", "eager_wf.2"]
    assert api.workflow(workflow_id).state == "succeeded"

    RUNS.clear()
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        diamond("rolled back").start()
        raise ZeroDivisionError
    assert RUNS == []


@pytest.mark.django_db(transaction=True)
def test_with_real_transactions_they_run_when_the_start_commits():
    with eager():
        with transaction.atomic():
            workflow_id = diamond().start()
            assert RUNS == []
        assert [name for name, _ in RUNS] == ["a", "b", "c", "d"]
    assert api.workflow(workflow_id).state == "succeeded"


@pytest.mark.django_db
def test_a_dead_step_fails_the_workflow_runs_on_failure_once_and_its_requeue_resumes_it():
    BROKEN.add("b")
    flow = diamond()
    flow.on_failure("eager_wf_failed", {})
    with eager():
        workflow_id = flow.start()
    # b ran twice (max_attempts 2) and is dead; c, an independent branch, finished; d waits.
    names = [name for name, _ in RUNS]
    assert names[0] == "a" and sorted(names[1:4]) == ["b", "b", "c"] and names[4:] == ["on_failure"]
    assert RUNS[-1] == ("on_failure", workflow_id)
    info = api.workflow(workflow_id)
    assert info.state == "failed" and info.dead == 1
    assert [(s.name, s.state) for s in info.steps] == [
        ("a", "succeeded"), ("b", "dead"), ("c", "succeeded"), ("d", "waiting")
    ]  # fmt: skip
    assert DeadMessage.objects.get(id=info.step("b").id).reason == "failed"

    RUNS.clear()
    BROKEN.clear()
    with eager():
        assert requeue_failed_steps(workflow_id) == [info.step("b").id]
    assert [name for name, _ in RUNS] == ["b", "d"]  # on_failure does not run again
    info = api.workflow(workflow_id)
    assert info.state == "succeeded" and [s.state for s in info.steps] == ["succeeded"] * 4
    assert api.check() == []


@pytest.mark.django_db
def test_api_requeue_dead_of_a_dead_step_resumes_the_workflow():
    BROKEN.add("b")
    with eager():
        workflow_id = diamond().start()
    dead_step = api.workflow(workflow_id).step("b").id
    RUNS.clear()
    BROKEN.clear()
    with eager():
        assert api.requeue_dead([dead_step]) == [dead_step]
    assert [name for name, _ in RUNS] == ["b", "d"]
    assert api.workflow(workflow_id).state == "succeeded"
    assert api.check() == []


@pytest.mark.django_db
def test_without_eager_mode_no_step_runs():
    workflow_id = diamond().start()
    assert RUNS == []
    assert api.workflow(workflow_id).step("a").state == "queued"


@handler("eager_wf_durable")
def approve_then_go(message: Message) -> dict[str, object]:
    """A workflow step that is a durable handler: a checkpointed step, then a wait for the
    approval event; its output goes to its children once it finishes."""
    quote = message.step("quote", lambda: RUNS.append(("quote", None)) or {"price": 3})
    approval = message.wait("approval", f"approve-{message.workflow_id}", timeout=3600)
    RUNS.append(("approved", approval))
    return {"price": quote["price"], "approved": approval}


@pytest.mark.django_db
def test_a_workflow_step_can_checkpoint_and_wait_for_an_event_before_its_children_run():
    """The step suspends on its wait (its children wait too, holding nothing); the emit
    resumes it: its checkpointed step does not run again, it acks, and its child runs with
    its output."""
    with eager():
        flow = Workflow("durable-step", channel="tenant-1")
        first = flow.step("eager_wf_durable", {}, name="approve")
        flow.step("eager_wf", {}, name="ship", after=[first])
        workflow_id = flow.start()
        assert RUNS == [("quote", None)]  # suspended on its wait; "ship" waits for it
        assert api.workflow(workflow_id).step("ship").state == "waiting"
        assert api.emit_event(f"approve-{workflow_id}", {"by": "ops"}) is True
    assert [name for name, _ in RUNS] == ["quote", "approved", "ship"]  # "quote" ran once
    assert dict(RUNS)["ship"] == {"approve": {"price": 3, "approved": {"by": "ops"}}}
    assert api.workflow(workflow_id).state == "succeeded"
