"""Durable handlers: checkpoints, pauses, events, resumes.

One function per named statement (``statements/__init__.py`` says how they run)."""

from __future__ import annotations

from typing import Any, NamedTuple

from .running import On, Row, rows, statement, typed, value


class Paused(NamedTuple):
    """What a durable sleep or wait found: its state ("suspend", "event", "done" ...), the
    event's payload (JSON text) and the time it waits until."""

    state: str
    result: str | None
    until_ms: int | None


__all__ = [
    "Checkpoint",
    "Paused",
    "step_get",
    "step_save",
    "durable_pause",
    "emit_event",
    "resume",
    "forget_steps",
    "message_steps",
    "suspended_counts",
]


@statement("step_get")
def step_get(*, id: Any, name: Any, on: On = None) -> list[Row]:
    return rows("step_get", {"id": id, "name": name}, on)


@statement("step_save")
def step_save(*, id: Any, name: Any, result: Any, token: Any, on: On = None) -> Any:
    return value("step_save", {"id": id, "name": name, "result": result, "token": token}, on)


@statement("durable_pause")
def durable_pause(*, delay_ms: Any, id: Any, key: Any, name: Any, token: Any, on: On = None) -> list[Paused]:
    return typed(
        Paused,
        "durable_pause",
        {"delay_ms": delay_ms, "id": id, "key": key, "name": name, "token": token},
        on,
    )


@statement("emit_event")
def emit_event(*, key: Any, payload: Any, tolerance_ms: Any, on: On = None) -> Any:
    return value("emit_event", {"key": key, "payload": payload, "tolerance_ms": tolerance_ms}, on)


@statement("resume")
def resume(*, ids: Any, tolerance_ms: Any, on: On = None) -> Any:
    return value("resume", {"ids": ids, "tolerance_ms": tolerance_ms}, on)


@statement("forget_steps")
def forget_steps(*, id: Any, name: Any, on: On = None) -> Any:
    return value("forget_steps", {"id": id, "name": name}, on)


class Checkpoint(NamedTuple):
    """One checkpoint of a message, as the admin shows it: a step's result (its first
    ``chars`` characters, and its full size), or a sleep's or wait's state."""

    name: str
    kind: str  # step, sleep or wait
    created_at: Any
    result_excerpt: str | None
    result_bytes: int | None
    event_key: str | None
    until_ms: int | None
    done: bool


@statement("message_steps")
def message_steps(*, chars: Any, id: Any, on: On = None) -> list[Checkpoint]:
    return typed(Checkpoint, "message_steps", {"chars": chars, "id": id}, on)


@statement("suspended_counts")
def suspended_counts(*, on: On = None) -> list[Row]:
    return rows("suspended_counts", None, on)
