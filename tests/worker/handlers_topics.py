"""Handlers of the topic tests' consumer groups, loaded by worker processes through
``LONNYMQ_HANDLER_MODULES`` (tests/worker/settings_topics.py)."""

from __future__ import annotations

from django_lonnymq import Message, handler, subscribe
from tests.testapp.handlers import record

# Declared in code: every worker started with these handlers writes the row.
subscribe("orders.declared", queue="tp_b")


@handler("tp_a")
def group_a(message: Message) -> None:
    record(message, "done")


@handler("tp_b")
def group_b(message: Message) -> None:
    record(message, "done")


@handler("tp_fail")
def group_that_fails(message: Message) -> None:
    record(message, "fail")
    raise RuntimeError(f"group tp_fail refuses event {message.payload.get('n')}")
