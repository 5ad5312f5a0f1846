"""A step's inputs are bounded (bounds.MAX_STEP_INPUTS, 64 MiB: its parents' outputs as
stored): a fan-in whose parents' outputs add up past it is dead-lettered where its last
parent acks ('inputs_too_large', its workflow failed, on_failure enqueued), the dequeue never
builds such inputs (a requeued step is dead-lettered again without running), and the other
tenants of the queue are served meanwhile. At real scale: nine parts of 8.28 MB each."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings

from django_lonnymq import Message, Workflow, api, enqueue, handler
from django_lonnymq.bounds import MAX_STEP_INPUTS
from django_lonnymq.models import DeadMessage
from django_lonnymq.testing import drain
from django_lonnymq.workflows import requeue_failed_steps

# slow: each test stores and reads back tens of megabytes of outputs (12-20 s each), so it runs
# in make test, not in the edit loop (make test-fast).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PART = [1] * 690_000  # 1.38 MB as JSON, 8,280,008 bytes stored: nine take 74,520,072
PART_BYTES = 8_280_008
ran: list[str] = []


@handler("fan_in")
def part(message: Message) -> object:
    ran.append(message.step_name or f"plain {message.payload['i']}")
    if message.step_name == "merge":
        return sorted(message.parent_outputs)
    return PART if message.step_name and message.step_name.startswith("p") else None


@handler("fan_in_failed")
def failed(message: Message) -> None:
    ran.append("on_failure")


@pytest.fixture(autouse=True)
def _ran():
    ran.clear()
    with override_settings(LONNYMQ_MAX_PAYLOAD_BYTES=8_388_608):
        yield
    ran.clear()


def fan_in(parts: int) -> int:
    flow = Workflow("fan-in")
    tops = [flow.step("fan_in", {}, name=f"p{i}", channel="big") for i in range(parts)]
    flow.step("fan_in", {}, name="merge", after=tops, channel="big")
    flow.on_failure("fan_in_failed", {})
    return flow.start()


def test_a_fan_in_past_the_bound_is_dead_lettered_where_its_last_parent_acks():
    assert PART_BYTES * 9 > MAX_STEP_INPUTS >= PART_BYTES * 8
    workflow_id = fan_in(9)
    for i in range(5):
        enqueue("fan_in", {"i": i}, channel=f"tenant-{i}")
    stats = drain("fan_in", "fan_in_failed")
    assert "merge" not in ran
    assert sorted(r for r in ran if r.startswith("plain")) == [f"plain {i}" for i in range(5)]
    assert ran.count("on_failure") == 1
    info = api.workflow(workflow_id)
    assert info.state == "failed" and info.step("merge").state == "dead"
    dead = DeadMessage.objects.get(id=info.step("merge").id)
    assert dead.reason == "discarded"
    assert dead.last_error == (
        f"inputs_too_large: the outputs of its parents take {9 * PART_BYTES} bytes as stored, more than "
        f"the {MAX_STEP_INPUTS} (64 MiB) a step's inputs may take"
    )
    assert stats.acked == 9 + 5 + 1
    assert api.check() == []

    # Requeued, it reaches a dequeue: its inputs are not built, it is dead-lettered again
    # (by the worker, with the same reason) without running, and the others are served.
    enqueue("fan_in", {"i": 5}, channel="tenant-5")
    assert requeue_failed_steps(workflow_id) == [info.step("merge").id]
    drain("fan_in")
    assert "merge" not in ran and "plain 5" in ran
    assert api.workflow(workflow_id).step("merge").state == "dead"
    again = DeadMessage.objects.get(id=info.step("merge").id)
    assert again.reason == "discarded" and again.last_error == dead.last_error


def test_a_fan_in_within_the_bound_gets_every_output():
    workflow_id = fan_in(8)
    drain("fan_in")
    info = api.workflow(workflow_id)
    assert info.state == "succeeded"
    assert info.step("merge").output == [f"p{i}" for i in range(8)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lonnymq_workflow_inputs_bytes_v1(parents) FROM lonnymq_workflow_step WHERE name = 'merge'"
        )
        assert cursor.fetchone()[0] == 8 * PART_BYTES
        # A parent acked before the sizes were recorded counts its text's length.
        cursor.execute("UPDATE lonnymq_workflow_step SET output_bytes = NULL WHERE name = 'p0'")
        cursor.execute(
            "SELECT lonnymq_workflow_inputs_bytes_v1(parents) FROM lonnymq_workflow_step WHERE name = 'merge'"
        )
        assert cursor.fetchone()[0] == 7 * PART_BYTES + len("[" + ", ".join(["1"] * 690_000) + "]")
