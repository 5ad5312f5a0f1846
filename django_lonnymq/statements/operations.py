"""Operators' calls: requeue, cancel, purge, configure channels, plans and queues, check, reap, consume.

One function per named statement (``statements/__init__.py`` says how they run)."""

from __future__ import annotations

from typing import Any, NamedTuple

from .running import On, Row, rows, statement, typed, value


class Cancelled(NamedTuple):
    """A message cancelled, and whether it was running (its handler is interrupted)."""

    id: int
    running: bool


class Blocked(NamedTuple):
    """An ordered channel a dead message blocks, and that message (its reason, error, death)."""

    channel: str
    message_id: int
    reason: str | None
    last_error: str | None
    died_at: Any


__all__ = [
    "Blocked",
    "order_channel",
    "unblock_channel",
    "blocked_channels",
    "Cancelled",
    "requeue_dead",
    "cancel",
    "run_now",
    "purge_channel",
    "delete_channel",
    "purge_dead",
    "configure_channel",
    "configure_plan",
    "delete_plan",
    "configure_queue_plan",
    "configure_queue",
    "pause_queue",
    "check",
    "reap",
    "consume",
]


@statement("requeue_dead")
def requeue_dead(*, ids: Any, reset_attempts: Any, tolerance_ms: Any, on: On = None) -> Any:
    return value(
        "requeue_dead", {"ids": ids, "reset_attempts": reset_attempts, "tolerance_ms": tolerance_ms}, on
    )


@statement("cancel")
def cancel(*, ids: Any, missing_ok: Any, on: On = None) -> list[Cancelled]:
    return typed(Cancelled, "cancel", {"ids": ids, "missing_ok": missing_ok}, on)


@statement("run_now")
def run_now(*, ids: Any, tolerance_ms: Any, on: On = None) -> Any:
    return value("run_now", {"ids": ids, "tolerance_ms": tolerance_ms}, on)


@statement("purge_channel")
def purge_channel(*, channel_id: Any, on: On = None) -> Any:
    return value("purge_channel", {"channel_id": channel_id}, on)


@statement("delete_channel")
def delete_channel(*, id: Any, on: On = None) -> Any:
    return value("delete_channel", {"id": id}, on)


@statement("purge_dead")
def purge_dead(*, ids: Any, on: On = None) -> Any:
    return value("purge_dead", {"ids": ids}, on)


@statement("configure_channel")
def configure_channel(
    *,
    channel: Any,
    inherit: Any,
    max_concurrency: Any,
    no_plan: Any,
    no_rate: Any,
    paused: Any,
    plan: Any,
    queue: Any,
    rate_burst: Any,
    rate_count: Any,
    rate_period_ms: Any,
    release_interval_ms: Any,
    unlimited: Any,
    weight: Any,
    on: On = None,
) -> Any:
    return value(
        "configure_channel",
        {
            "channel": channel,
            "inherit": inherit,
            "max_concurrency": max_concurrency,
            "no_plan": no_plan,
            "no_rate": no_rate,
            "paused": paused,
            "plan": plan,
            "queue": queue,
            "rate_burst": rate_burst,
            "rate_count": rate_count,
            "rate_period_ms": rate_period_ms,
            "release_interval_ms": release_interval_ms,
            "unlimited": unlimited,
            "weight": weight,
        },
        on,
    )


@statement("configure_plan")
def configure_plan(
    *,
    max_concurrency: Any,
    name: Any,
    no_rate: Any,
    ordered: Any,
    rate_burst: Any,
    rate_count: Any,
    rate_period_ms: Any,
    release_interval_ms: Any,
    unlimited: Any,
    weight: Any,
    on: On = None,
) -> Any:
    return value(
        "configure_plan",
        {
            "max_concurrency": max_concurrency,
            "name": name,
            "no_rate": no_rate,
            "ordered": ordered,
            "rate_burst": rate_burst,
            "rate_count": rate_count,
            "rate_period_ms": rate_period_ms,
            "release_interval_ms": release_interval_ms,
            "unlimited": unlimited,
            "weight": weight,
        },
        on,
    )


@statement("delete_plan")
def delete_plan(*, name: Any, on: On = None) -> Any:
    return value("delete_plan", {"name": name}, on)


@statement("configure_queue_plan")
def configure_queue_plan(
    *,
    max_concurrency: Any,
    no_rate: Any,
    plan: Any,
    queue: Any,
    rate_burst: Any,
    rate_count: Any,
    rate_period_ms: Any,
    unlimited: Any,
    on: On = None,
) -> Any:
    return value(
        "configure_queue_plan",
        {
            "max_concurrency": max_concurrency,
            "no_rate": no_rate,
            "plan": plan,
            "queue": queue,
            "rate_burst": rate_burst,
            "rate_count": rate_count,
            "rate_period_ms": rate_period_ms,
            "unlimited": unlimited,
        },
        on,
    )


@statement("configure_queue")
def configure_queue(
    *,
    max_concurrency: Any,
    no_rate: Any,
    queue: Any,
    rate_burst: Any,
    rate_count: Any,
    rate_period_ms: Any,
    unlimited: Any,
    on: On = None,
) -> Any:
    return value(
        "configure_queue",
        {
            "max_concurrency": max_concurrency,
            "no_rate": no_rate,
            "queue": queue,
            "rate_burst": rate_burst,
            "rate_count": rate_count,
            "rate_period_ms": rate_period_ms,
            "unlimited": unlimited,
        },
        on,
    )


@statement("pause_queue")
def pause_queue(*, paused: Any, queue: Any, on: On = None) -> Any:
    return value("pause_queue", {"paused": paused, "queue": queue}, on)


@statement("check")
def check(*, grace_ms: Any, on: On = None) -> list[Row]:
    return rows("check", {"grace_ms": grace_ms}, on)


@statement("reap")
def reap(*, dedup_window_ms: Any, limit: Any, tolerance_ms: Any, on: On = None) -> Any:
    return value(
        "reap", {"dedup_window_ms": dedup_window_ms, "limit": limit, "tolerance_ms": tolerance_ms}, on
    )


@statement("consume")
def consume(*, channel: Any, queue: Any, tokens: Any, on: On = None) -> list[Row]:
    return rows("consume", {"channel": channel, "queue": queue, "tokens": tokens}, on)


@statement("order_channel")
def order_channel(*, queue: Any, channel: Any, ordered: Any, on: On = None) -> Any:
    return value("order_channel", {"queue": queue, "channel": channel, "ordered": ordered}, on)


@statement("unblock_channel")
def unblock_channel(*, queue: Any, channel: Any, on: On = None) -> Any:
    return value("unblock_channel", {"queue": queue, "channel": channel}, on)


@statement("blocked_channels")
def blocked_channels(*, queue: Any, limit: Any, on: On = None) -> list[Blocked]:
    return typed(Blocked, "blocked_channels", {"queue": queue, "limit": limit}, on)
