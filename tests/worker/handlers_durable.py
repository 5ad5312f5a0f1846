"""Durable handlers that worker-process tests run (tests/worker/test_durable.py). Each
step records a row in testapp_delivery through Django's connection: the step's own write,
committed with its checkpoint or not at all."""

from __future__ import annotations

import time

from django_lonnymq import Message, handler
from tests.testapp.handlers import record


@handler("acc_durable_steps")
def three_steps(message: Message) -> None:
    """Three steps; the third sleeps (the test kills the worker there) after its write."""

    def step(name: str, seconds: float = 0) -> str:
        record(message, name)
        time.sleep(seconds)
        return name

    message.step("charge", step, "charge")
    message.step("email", step, "email")
    # Only the first delivery lingers in the third step: the test kills its worker there.
    linger = float(message.payload.get("third_seconds", 0)) if message.attempt == 1 else 0.0
    message.step("provision", step, "provision", linger)
    record(message, "done")


@handler("acc_durable_sleep")
def sleeper(message: Message) -> None:
    message.step("before", record, message, "before")
    record(message, "run")
    if message.payload.get("sleep"):
        message.sleep("nap", message.payload["sleep"])
    message.step("after", record, message, "after")
    record(message, "done")


@handler("acc_durable_wait")
def waiter(message: Message) -> None:
    record(message, "run")
    got = message.wait("approval", message.payload["key"], timeout=message.payload.get("timeout"))
    record(message, "timeout" if got is None else f"event:{got['by']}")


@handler("acc_durable_flow")
def flow_nap(message: Message) -> dict[str, str]:
    """A workflow step that is a durable handler: a checkpointed step, a durable sleep, then
    its output (which its child receives)."""
    quote = message.step("quote", lambda: record(message, "quote") or "q1")
    message.sleep("nap", message.payload.get("sleep", 1))
    record(message, "woke")
    return {"quote": quote}


@handler("acc_durable_flow_child")
def flow_child(message: Message) -> None:
    record(message, f"child:{message.parent_outputs['nap']['quote']}")
