"""The lifecycle's statements: leasing, outcomes, leases, and what the worker's connection listens to.

One function per named statement (``statements/__init__.py`` says how they run)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from .running import On, Row, rows, statement, typed, value


class Leased(NamedTuple):
    """A message the dequeue leased; a workflow step's name, parents' outputs (NULL past
    their bound) and their size come with it (NULL for other messages)."""

    id: int
    channel: str
    payload: Any
    attempts: int
    max_attempts: int
    priority: int
    dedup_key: str | None
    enqueued_at: datetime
    lease_token: UUID
    lease_until: int
    step_name: str | None
    outputs: Any
    inputs_bytes: int | None


class Extended(NamedTuple):
    """A lease extended, and whether its message was asked to cancel meanwhile."""

    id: int
    cancel_requested: bool


__all__ = [
    "Leased",
    "Extended",
    "dequeue",
    "next_due",
    "pending",
    "ack",
    "fail",
    "snooze",
    "extend",
    "release",
    "suspend",
    "workflow_ack",
    "messages_present",
    "listen",
    "listen_cancels",
    "now_ms",
]


@statement("dequeue")
def dequeue(
    *, batch_size: Any, lease_ms: Any, queue: Any, tolerance_ms: Any, worker: Any, on: On = None
) -> list[Leased]:
    return typed(
        Leased,
        "dequeue",
        {
            "batch_size": batch_size,
            "lease_ms": lease_ms,
            "queue": queue,
            "tolerance_ms": tolerance_ms,
            "worker": worker,
        },
        on,
    )


@statement("next_due")
def next_due(*, queues: Any, on: On = None) -> Any:
    return value("next_due", {"queues": queues}, on)


@statement("pending")
def pending(*, queues: Any, on: On = None) -> Any:
    return value("pending", {"queues": queues}, on)


@statement("ack")
def ack(*, ids: Any, tokens: Any, on: On = None) -> Any:
    return value("ack", {"ids": ids, "tokens": tokens}, on)


@statement("fail")
def fail(
    *,
    backoff_base_ms: Any,
    backoff_max_ms: Any,
    error: Any,
    id: Any,
    reason: Any,
    retry_delay_ms: Any,
    token: Any,
    tolerance_ms: Any,
    on: On = None,
) -> Any:
    return value(
        "fail",
        {
            "backoff_base_ms": backoff_base_ms,
            "backoff_max_ms": backoff_max_ms,
            "error": error,
            "id": id,
            "reason": reason,
            "retry_delay_ms": retry_delay_ms,
            "token": token,
            "tolerance_ms": tolerance_ms,
        },
        on,
    )


@statement("snooze")
def snooze(
    *,
    backoff_base_ms: Any,
    backoff_max_ms: Any,
    delay_ms: Any,
    id: Any,
    max_snoozes: Any,
    token: Any,
    tolerance_ms: Any,
    on: On = None,
) -> Any:
    return value(
        "snooze",
        {
            "backoff_base_ms": backoff_base_ms,
            "backoff_max_ms": backoff_max_ms,
            "delay_ms": delay_ms,
            "id": id,
            "max_snoozes": max_snoozes,
            "token": token,
            "tolerance_ms": tolerance_ms,
        },
        on,
    )


@statement("extend")
def extend(*, ids: Any, lease_ms: Any, tokens: Any, on: On = None) -> list[Extended]:
    return typed(Extended, "extend", {"ids": ids, "lease_ms": lease_ms, "tokens": tokens}, on)


@statement("release")
def release(*, ids: Any, tokens: Any, tolerance_ms: Any, on: On = None) -> Any:
    return value("release", {"ids": ids, "tokens": tokens, "tolerance_ms": tolerance_ms}, on)


@statement("suspend")
def suspend(*, id: Any, name: Any, token: Any, tolerance_ms: Any, on: On = None) -> Any:
    return value("suspend", {"id": id, "name": name, "token": token, "tolerance_ms": tolerance_ms}, on)


@statement("workflow_ack")
def workflow_ack(*, ids: Any, outputs: Any, tokens: Any, tolerance_ms: Any, on: On = None) -> Any:
    return value(
        "workflow_ack", {"ids": ids, "outputs": outputs, "tokens": tokens, "tolerance_ms": tolerance_ms}, on
    )


@statement("messages_present")
def messages_present(*, ids: Any, on: On = None) -> list[Row]:
    return rows("messages_present", {"ids": ids}, on)


@statement("listen")
def listen(*, on: On = None) -> list[Row]:
    return rows("listen", None, on, prepare=False)


@statement("listen_cancels")
def listen_cancels(*, on: On = None) -> list[Row]:
    return rows("listen_cancels", None, on, prepare=False)


@statement("now_ms")
def now_ms(*, on: On = None) -> Any:
    return value("now_ms", None, on)
