"""Workflows: start, cancel, state, steps, checks, counts.

One function per named statement (``statements/__init__.py`` says how they run)."""

from __future__ import annotations

from typing import Any

from .running import On, Row, rows, statement, value

__all__ = [
    "workflow_start",
    "workflow_cancel",
    "workflow_state",
    "workflow_steps",
    "workflow_check",
    "workflow_failed_steps",
    "workflow_counts",
]


@statement("workflow_start")
def workflow_start(
    *,
    channel: Any,
    channels: Any,
    delays_ms: Any,
    edge_children: Any,
    edge_parents: Any,
    max_attempts: Any,
    name: Any,
    names: Any,
    on_failure_channel: Any,
    on_failure_max_attempts: Any,
    on_failure_payload: Any,
    on_failure_queue: Any,
    payloads: Any,
    queues: Any,
    tolerance_ms: Any,
    on: On = None,
) -> Any:
    return value(
        "workflow_start",
        {
            "channel": channel,
            "channels": channels,
            "delays_ms": delays_ms,
            "edge_children": edge_children,
            "edge_parents": edge_parents,
            "max_attempts": max_attempts,
            "name": name,
            "names": names,
            "on_failure_channel": on_failure_channel,
            "on_failure_max_attempts": on_failure_max_attempts,
            "on_failure_payload": on_failure_payload,
            "on_failure_queue": on_failure_queue,
            "payloads": payloads,
            "queues": queues,
            "tolerance_ms": tolerance_ms,
        },
        on,
        arrays=True,
    )


@statement("workflow_cancel")
def workflow_cancel(*, id: Any, on: On = None) -> Any:
    return value("workflow_cancel", {"id": id}, on)


@statement("workflow_state")
def workflow_state(*, id: Any, on: On = None) -> list[Row]:
    return rows("workflow_state", {"id": id}, on)


@statement("workflow_steps")
def workflow_steps(*, id: Any, on: On = None) -> list[Row]:
    return rows("workflow_steps", {"id": id}, on)


@statement("workflow_check")
def workflow_check(*, on: On = None) -> list[Row]:
    return rows("workflow_check", None, on)


@statement("workflow_failed_steps")
def workflow_failed_steps(*, id: Any, on: On = None) -> list[Row]:
    return rows("workflow_failed_steps", {"id": id}, on)


@statement("workflow_counts")
def workflow_counts(*, on: On = None) -> list[Row]:
    return rows("workflow_counts", None, on)
