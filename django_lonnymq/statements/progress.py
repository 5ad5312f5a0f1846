"""Progress reports: written by workers and eager mode, read by ``api`` and the dashboard.

One function per named statement (``statements/__init__.py`` says how they run)."""

from __future__ import annotations

from typing import Any, NamedTuple

from .running import On, rows, statement, typed, value

__all__ = [
    "MessageStatusRow",
    "ProgressRow",
    "progress",
    "progress_prune",
    "message_status",
    "queue_progress",
]


class MessageStatusRow(NamedTuple):
    state: str
    queue: str | None
    channel: str | None
    attempts: int | None
    max_attempts: int | None
    last_error: str | None
    done: float | None
    total: float | None
    note: str | None
    updated_at: int | None


class ProgressRow(NamedTuple):
    message_id: int
    channel: str
    done: float
    total: float | None
    note: str
    updated_at: int


@statement("progress")
def progress(
    *, ids: Any, queues: Any, channels: Any, done: Any, totals: Any, notes: Any, on: On = None
) -> Any:
    return value(
        "progress",
        {"ids": ids, "queues": queues, "channels": channels, "done": done, "totals": totals, "notes": notes},
        on,
        arrays=True,
    )


@statement("progress_prune")
def progress_prune(*, retention_ms: Any, limit: Any, on: On = None) -> Any:
    return value("progress_prune", {"retention_ms": retention_ms, "limit": limit}, on)


@statement("message_status")
def message_status(*, id: Any, on: On = None) -> list[MessageStatusRow]:
    return [MessageStatusRow(*row) for row in rows("message_status", {"id": id}, on)]


@statement("queue_progress")
def queue_progress(*, queue: Any, limit: Any, walk: Any, on: On = None) -> list[ProgressRow]:
    return typed(ProgressRow, "queue_progress", {"queue": queue, "limit": limit, "walk": walk}, on)
