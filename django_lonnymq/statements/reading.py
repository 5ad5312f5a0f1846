"""The read side: figures for the admin, the dashboard, health and alarms (sql/stats.sql).

One function per named statement (``statements/__init__.py`` says how they run)."""

from __future__ import annotations

from typing import Any

from .running import On, Row, rows, statement, value

__all__ = [
    "queue_stats",
    "channel_counts",
    "estimated_rows",
    "live_workers",
    "table_health",
    "horizon_holders",
    "expired_leases",
    "queue_tenants",
    "queue_health",
    "queues_with_ready_work",
]


@statement("queue_stats")
def queue_stats(*, model: Any, cap: Any, queues: Any, on: On = None) -> list[Any]:
    return rows("queue_stats", {"cap": cap, "queues": queues}, on, model=model)


@statement("channel_counts")
def channel_counts(*, cap: Any, ids: Any, on: On = None) -> list[Row]:
    return rows("channel_counts", {"cap": cap, "ids": ids}, on)


@statement("estimated_rows")
def estimated_rows(*, table: Any, on: On = None) -> Any:
    return value("estimated_rows", {"table": table}, on)


@statement("live_workers")
def live_workers(*, lost_after_s: Any, on: On = None) -> list[Row]:
    return rows("live_workers", {"lost_after_s": lost_after_s}, on)


@statement("table_health")
def table_health(*, tables: Any, on: On = None) -> list[Row]:
    return rows("table_health", {"tables": tables}, on)


@statement("horizon_holders")
def horizon_holders(*, limit: Any, on: On = None) -> list[Row]:
    return rows("horizon_holders", {"limit": limit}, on)


@statement("expired_leases")
def expired_leases(*, grace_ms: Any, on: On = None) -> list[Row]:
    return rows("expired_leases", {"grace_ms": grace_ms}, on)


@statement("queue_tenants")
def queue_tenants(*, candidates: Any, cap: Any, limit: Any, queue: Any, on: On = None) -> list[Row]:
    return rows("queue_tenants", {"candidates": candidates, "cap": cap, "limit": limit, "queue": queue}, on)


@statement("queue_health")
def queue_health(*, cap: Any, on: On = None) -> list[Row]:
    return rows("queue_health", {"cap": cap}, on)


@statement("queues_with_ready_work")
def queues_with_ready_work(*, on: On = None) -> list[Row]:
    return rows("queues_with_ready_work", None, on)
