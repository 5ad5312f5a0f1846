"""The workers' duties: vacuum, presence, samples, traces, pruning, schedules' ticks.

One function per named statement (``statements/__init__.py`` says how they run)."""

from __future__ import annotations

from typing import Any, NamedTuple

from .running import On, Row, rows, statement, typed, value


class VacuumDue(NamedTuple):
    """A table the workers vacuum: whether its dead row versions passed the threshold, and the
    xmin horizon it would vacuum under."""

    table: str
    due: bool
    horizon: str | None


__all__ = [
    "VacuumDue",
    "vacuum_due",
    "vacuum_channel",
    "vacuum_wake",
    "vacuum_message",
    "worker_beat",
    "worker_stop",
    "record_samples",
    "record_samples_due",
    "trace_load",
    "trace_prune",
    "prune_channels",
    "claim_schedules",
    "fire_schedule",
    "sync_schedules",
    "durable_prune",
    "workflow_prune",
]


@statement("vacuum_due")
def vacuum_due(*, threshold: Any, on: On = None) -> list[VacuumDue]:
    return typed(VacuumDue, "vacuum_due", {"threshold": threshold}, on)


@statement("vacuum_channel")
def vacuum_channel(*, on: On = None) -> list[Row]:
    return rows("vacuum_channel", None, on, prepare=False)


@statement("vacuum_wake")
def vacuum_wake(*, on: On = None) -> list[Row]:
    return rows("vacuum_wake", None, on, prepare=False)


@statement("vacuum_message")
def vacuum_message(*, on: On = None) -> list[Row]:
    return rows("vacuum_message", None, on, prepare=False)


@statement("worker_beat")
def worker_beat(
    *,
    concurrency: Any,
    failed: Any,
    host: Any,
    in_flight: Any,
    instance: Any,
    lost_after_ms: Any,
    name: Any,
    pid: Any,
    processed: Any,
    prune_after_ms: Any,
    queues: Any,
    started_at: Any,
    on: On = None,
) -> list[Row]:
    return rows(
        "worker_beat",
        {
            "concurrency": concurrency,
            "failed": failed,
            "host": host,
            "in_flight": in_flight,
            "instance": instance,
            "lost_after_ms": lost_after_ms,
            "name": name,
            "pid": pid,
            "processed": processed,
            "prune_after_ms": prune_after_ms,
            "queues": queues,
            "started_at": started_at,
        },
        on,
    )


@statement("worker_stop")
def worker_stop(
    *, failed: Any, in_flight: Any, instance: Any, name: Any, processed: Any, on: On = None
) -> list[Row]:
    return rows(
        "worker_stop",
        {
            "failed": failed,
            "in_flight": in_flight,
            "instance": instance,
            "name": name,
            "processed": processed,
        },
        on,
    )


@statement("record_samples")
def record_samples(*, model: Any, cap: Any, keep_ms: Any, on: On = None) -> list[Any]:
    return rows("record_samples", {"cap": cap, "keep_ms": keep_ms}, on, model=model)


@statement("record_samples_due")
def record_samples_due(*, cap: Any, interval_ms: Any, keep_ms: Any, on: On = None) -> list[Row]:
    return rows("record_samples_due", {"cap": cap, "interval_ms": interval_ms, "keep_ms": keep_ms}, on)


@statement("trace_load")
def trace_load(*, ids: Any, on: On = None) -> list[Row]:
    return rows("trace_load", {"ids": ids}, on)


@statement("trace_prune")
def trace_prune(*, older_than_s: Any, on: On = None) -> list[Row]:
    return rows("trace_prune", {"older_than_s": older_than_s}, on)


@statement("prune_channels")
def prune_channels(*, idle_ms: Any, limit: Any, on: On = None) -> list[Row]:
    return rows("prune_channels", {"idle_ms": idle_ms, "limit": limit}, on)


@statement("claim_schedules")
def claim_schedules(*, limit: Any, now_ms: Any, queues: Any, on: On = None) -> list[Row]:
    return rows("claim_schedules", {"limit": limit, "now_ms": now_ms, "queues": queues}, on)


@statement("fire_schedule")
def fire_schedule(
    *,
    claimed_at: Any,
    default_max_attempts: Any,
    error: Any,
    id: Any,
    next_tick_at: Any,
    priority_step_ms: Any,
    ticks: Any,
    tolerance_ms: Any,
    on: On = None,
) -> list[Row]:
    return rows(
        "fire_schedule",
        {
            "claimed_at": claimed_at,
            "default_max_attempts": default_max_attempts,
            "error": error,
            "id": id,
            "next_tick_at": next_tick_at,
            "priority_step_ms": priority_step_ms,
            "ticks": ticks,
            "tolerance_ms": tolerance_ms,
        },
        on,
    )


@statement("sync_schedules")
def sync_schedules(*, declared: Any, names: Any, next_tick_ats: Any, queues: Any, on: On = None) -> list[Row]:
    return rows(
        "sync_schedules",
        {"declared": declared, "names": names, "next_tick_ats": next_tick_ats, "queues": queues},
        on,
    )


@statement("durable_prune")
def durable_prune(*, event_retention_ms: Any, limit: Any, on: On = None) -> Any:
    return value("durable_prune", {"event_retention_ms": event_retention_ms, "limit": limit}, on)


@statement("workflow_prune")
def workflow_prune(*, limit: Any, older_than_ms: Any, on: On = None) -> Any:
    return value("workflow_prune", {"limit": limit, "older_than_ms": older_than_ms}, on)
