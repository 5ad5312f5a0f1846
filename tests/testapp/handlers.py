"""Handlers that worker-process tests run. Their effects are recorded in the database
(table testapp_delivery, created by tests/conftest.py) so tests can assert on them."""

from __future__ import annotations

import os
import time

from django.db import connection

from django_lonnymq import Discard, Message, Retry, handler


def record(message: Message, event: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO testapp_delivery (message_id, queue, channel, attempt, event, pid, payload)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb)",
            [
                message.id,
                message.queue,
                message.channel,
                message.attempt,
                event,
                os.getpid(),
                __import__("json").dumps(message.payload),
            ],
        )


@handler("t_record")
def record_only(message: Message) -> None:
    record(message, "done")


@handler("t_sleep")
def sleep_then_record(message: Message) -> None:
    """Records start and end, and tracks in-flight per channel in testapp_inflight: in slots,
    when the payload says how many its message takes (``"slots"``; 1 otherwise)."""
    record(message, "start")
    slots = int(message.payload.get("slots", 1))
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE testapp_inflight SET now = now + %s, peak = greatest(peak, now + %s) WHERE channel = %s",
            [slots, slots, message.channel],
        )
    try:
        time.sleep(float(message.payload.get("seconds", 0.05)))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("UPDATE testapp_inflight SET now = now - %s WHERE channel = %s", [slots, message.channel])
    record(message, "done")


@handler("t_fail")
def always_fail(message: Message) -> None:
    record(message, "fail")
    raise RuntimeError(f"boom on attempt {message.attempt}")


@handler("t_discard")
def discard(message: Message) -> None:
    raise Discard("not wanted")


@handler("t_noop")
def noop(message: Message) -> None:
    """Touches no database: for tests where the handler's own connection must not matter."""


@handler("t_bad_retry")
def bad_retry(message: Message) -> None:
    """Asks for a retry with the delay the payload names ("nan" for float("nan"))."""
    delay = message.payload["delay"]
    raise Retry(delay=float(delay) if delay == "nan" else delay)


class _Unprintable(Exception):  # noqa: N818
    """An exception that cannot be shown: str() and repr() raise."""

    def __str__(self) -> str:
        raise RuntimeError("cannot show this exception")

    __repr__ = __str__


@handler("t_unprintable")
def unprintable(message: Message) -> None:
    raise _Unprintable()


@handler("t_retry")
def retry_later(message: Message) -> None:
    record(message, "retry" if message.attempt == 1 else "done")
    if message.attempt == 1:
        raise Retry(delay=0.2, reason="come back later")


# -- workflows (tests/worker/test_workflows.py) --------------------------------------


def record_step(message: Message, event: str) -> None:
    """A step's delivery, its payload column holding its name and parents' outputs."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO testapp_delivery (message_id, queue, channel, attempt, event, pid, payload)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb)",
            [
                message.id,
                message.queue,
                message.channel,
                message.attempt,
                event,
                os.getpid(),
                __import__("json").dumps(
                    {"step": message.step_name, "workflow": message.workflow_id, "parents": message.parent_outputs}
                ),
            ],
        )


@handler("w_step")
def workflow_step(message: Message) -> dict[str, object]:
    """Records its run; its output is its name and how many parent outputs it saw."""
    record_step(message, "done")
    time.sleep(float(message.payload.get("seconds", 0)))
    return {"name": message.step_name, "seen": sorted(message.parent_outputs)}


@handler("w_flaky")
def workflow_flaky(message: Message) -> str:
    """Fails until the row ('w_flaky_ok') is in testapp_inflight."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM testapp_inflight WHERE channel = 'w_flaky_ok'")
        ok = cursor.fetchone() is not None
    record_step(message, "done" if ok else "fail")
    if not ok:
        raise RuntimeError("not yet")
    return "fixed"


@handler("w_slow")
def workflow_slow(message: Message) -> None:
    """Runs until cancelled (checks message.cancel_requested), at most 30 s."""
    record_step(message, "start")
    deadline = time.monotonic() + 30
    while not message.cancel_requested and time.monotonic() < deadline:
        time.sleep(0.02)
    record_step(message, "stopped")


@handler("w_failed")
def workflow_failed(message: Message) -> None:
    """A workflow's on_failure message."""
    record_step(message, "on_failure")
