"""Writing messages: single, many, Django Tasks, traced, topics.

One function per named statement (``statements/__init__.py`` says how they run)."""

from __future__ import annotations

from typing import Any

from .running import On, Row, rows, statement, value

__all__ = [
    "enqueue",
    "enqueue_many",
    "enqueue_task",
    "enqueue_task_keyed",
    "enqueue_traced",
    "enqueue_many_traced",
    "publish",
    "subscribe",
]


@statement("enqueue")
def enqueue(
    *,
    channel: Any,
    dedup_key: Any,
    delay_ms: Any,
    max_attempts: Any,
    on_duplicate: Any,
    payload: Any,
    priority: Any,
    priority_step_ms: Any,
    queue: Any,
    run_at_ms: Any,
    tolerance_ms: Any,
    cost: Any,
    slots: Any,
    on: On = None,
) -> Any:
    return value(
        "enqueue",
        {
            "channel": channel,
            "dedup_key": dedup_key,
            "delay_ms": delay_ms,
            "max_attempts": max_attempts,
            "on_duplicate": on_duplicate,
            "payload": payload,
            "priority": priority,
            "priority_step_ms": priority_step_ms,
            "queue": queue,
            "run_at_ms": run_at_ms,
            "tolerance_ms": tolerance_ms,
            "cost": cost,
            "slots": slots,
        },
        on,
    )


@statement("enqueue_many")
def enqueue_many(
    *,
    channels: Any,
    dedup_keys: Any,
    default_max_attempts: Any,
    delay_ms: Any,
    max_attempts: Any,
    on_duplicate: Any,
    payloads: Any,
    priorities: Any,
    priority_step_ms: Any,
    queue: Any,
    run_at_ms: Any,
    tolerance_ms: Any,
    costs: Any,
    slots: Any,
    on: On = None,
) -> Any:
    return value(
        "enqueue_many",
        {
            "channels": channels,
            "dedup_keys": dedup_keys,
            "default_max_attempts": default_max_attempts,
            "delay_ms": delay_ms,
            "max_attempts": max_attempts,
            "on_duplicate": on_duplicate,
            "payloads": payloads,
            "priorities": priorities,
            "priority_step_ms": priority_step_ms,
            "queue": queue,
            "run_at_ms": run_at_ms,
            "tolerance_ms": tolerance_ms,
            "costs": costs,
            "slots": slots,
        },
        on,
        arrays=True,
    )


@statement("enqueue_task")
def enqueue_task(
    *,
    channel: Any,
    enqueued_at: Any,
    max_attempts: Any,
    payload: Any,
    priority: Any,
    priority_step_ms: Any,
    queue: Any,
    run_after: Any,
    run_at_ms: Any,
    tolerance_ms: Any,
    on: On = None,
) -> Any:
    return value(
        "enqueue_task",
        {
            "channel": channel,
            "enqueued_at": enqueued_at,
            "max_attempts": max_attempts,
            "payload": payload,
            "priority": priority,
            "priority_step_ms": priority_step_ms,
            "queue": queue,
            "run_after": run_after,
            "run_at_ms": run_at_ms,
            "tolerance_ms": tolerance_ms,
        },
        on,
    )


@statement("enqueue_task_keyed")
def enqueue_task_keyed(
    *,
    model: Any,
    channel: Any,
    dedup_key: Any,
    enqueued_at: Any,
    max_attempts: Any,
    on_duplicate: Any,
    payload: Any,
    priority: Any,
    priority_step_ms: Any,
    queue: Any,
    run_after: Any,
    run_at_ms: Any,
    tolerance_ms: Any,
    on: On = None,
) -> list[Any]:
    return rows(
        "enqueue_task_keyed",
        {
            "channel": channel,
            "dedup_key": dedup_key,
            "enqueued_at": enqueued_at,
            "max_attempts": max_attempts,
            "on_duplicate": on_duplicate,
            "payload": payload,
            "priority": priority,
            "priority_step_ms": priority_step_ms,
            "queue": queue,
            "run_after": run_after,
            "run_at_ms": run_at_ms,
            "tolerance_ms": tolerance_ms,
        },
        on,
        model=model,
    )


@statement("enqueue_traced")
def enqueue_traced(
    *,
    channel: Any,
    context: Any,
    dedup_key: Any,
    delay_ms: Any,
    max_attempts: Any,
    on_duplicate: Any,
    payload: Any,
    priority: Any,
    priority_step_ms: Any,
    queue: Any,
    run_at_ms: Any,
    tolerance_ms: Any,
    cost: Any,
    slots: Any,
    on: On = None,
) -> Any:
    return value(
        "enqueue_traced",
        {
            "channel": channel,
            "context": context,
            "dedup_key": dedup_key,
            "delay_ms": delay_ms,
            "max_attempts": max_attempts,
            "on_duplicate": on_duplicate,
            "payload": payload,
            "priority": priority,
            "priority_step_ms": priority_step_ms,
            "queue": queue,
            "run_at_ms": run_at_ms,
            "tolerance_ms": tolerance_ms,
            "cost": cost,
            "slots": slots,
        },
        on,
    )


@statement("enqueue_many_traced")
def enqueue_many_traced(
    *,
    channels: Any,
    context: Any,
    dedup_keys: Any,
    default_max_attempts: Any,
    delay_ms: Any,
    max_attempts: Any,
    on_duplicate: Any,
    payloads: Any,
    priorities: Any,
    priority_step_ms: Any,
    queue: Any,
    run_at_ms: Any,
    tolerance_ms: Any,
    costs: Any,
    slots: Any,
    on: On = None,
) -> Any:
    return value(
        "enqueue_many_traced",
        {
            "channels": channels,
            "context": context,
            "dedup_keys": dedup_keys,
            "default_max_attempts": default_max_attempts,
            "delay_ms": delay_ms,
            "max_attempts": max_attempts,
            "on_duplicate": on_duplicate,
            "payloads": payloads,
            "priorities": priorities,
            "priority_step_ms": priority_step_ms,
            "queue": queue,
            "run_at_ms": run_at_ms,
            "tolerance_ms": tolerance_ms,
            "costs": costs,
            "slots": slots,
        },
        on,
        arrays=True,
    )


@statement("publish")
def publish(
    *,
    dedup_keys: Any,
    default_max_attempts: Any,
    keys: Any,
    on_duplicate: Any,
    payloads: Any,
    priority_step_ms: Any,
    run_at_ms: Any,
    tolerance_ms: Any,
    topic: Any,
    costs: Any,
    slots: Any,
    on: On = None,
) -> list[Row]:
    return rows(
        "publish",
        {
            "dedup_keys": dedup_keys,
            "default_max_attempts": default_max_attempts,
            "keys": keys,
            "on_duplicate": on_duplicate,
            "payloads": payloads,
            "priority_step_ms": priority_step_ms,
            "run_at_ms": run_at_ms,
            "tolerance_ms": tolerance_ms,
            "topic": topic,
            "costs": costs,
            "slots": slots,
        },
        on,
        arrays=True,
    )


@statement("subscribe")
def subscribe(*, queues: Any, topics: Any, on: On = None) -> Any:
    return value("subscribe", {"queues": queues, "topics": topics}, on)
