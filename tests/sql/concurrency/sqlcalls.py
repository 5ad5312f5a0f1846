"""Raw psycopg calls of the queue's SQL functions, for tests that drive many real connections.

Each function runs one statement on the connection it is given and leaves transaction control
to the caller (producers hold transactions open on purpose)."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

DEADLOCK = "40P01"
SERIALIZATION_FAILURE = "40001"
LOCK_NOT_AVAILABLE = "55P03"
QUERY_CANCELED = "57014"


def name_pids(text: str, roles: dict[int, str]) -> str:
    """A server message (a deadlock's) with each "process N" named by its role in the test."""
    return re.sub(r"[Pp]rocess (\d+)", lambda m: f"process {m[1]} ({roles.get(int(m[1]), '?')})", text)


def enqueue(conn: psycopg.Connection[Any], queue: str, channel: str, payload: Any = None,
            *, delay_ms: int | None = None, max_attempts: int = 5) -> int:
    row = conn.execute(
        "SELECT lonnymq_enqueue_v1(%s, %s, %s, NULL, %s, 0, NULL, %s)",
        [queue, channel, Jsonb(payload if payload is not None else {}), delay_ms, max_attempts],
    ).fetchone()
    assert row is not None
    return int(row[0])


def enqueue_many(conn: psycopg.Connection[Any], queue: str, channels: list[str], payloads: list[Any],
                 *, delays_ms: list[int | None] | None = None, dedup_keys: list[str | None] | None = None,
                 max_attempts: int = 5) -> list[int]:
    row = conn.execute(
        "SELECT lonnymq_enqueue_many_v1(%s, %s::text[], %s::jsonb[], NULL, %s::bigint[],"
        " NULL, %s::text[], NULL, %s)",
        [queue, channels, [json.dumps(p) for p in payloads], delays_ms, dedup_keys, max_attempts],
    ).fetchone()
    assert row is not None
    return [int(i) for i in row[0]]


def dequeue(conn: psycopg.Connection[Any], queue: str, batch: int = 1, lease_ms: int = 60_000,
            worker: str = "test") -> list[tuple[int, str, Any]]:
    """Lease up to ``batch`` messages: (id, channel, lease_token) rows, in release order."""
    return [
        (int(r[0]), r[1], r[2])
        for r in conn.execute(
            "SELECT id, channel, lease_token FROM lonnymq_dequeue_v1(%s, %s, %s, %s)",
            [queue, batch, lease_ms, worker],
        ).fetchall()
    ]


def ack(conn: psycopg.Connection[Any], leased: list[tuple[int, str, Any]]) -> list[int]:
    if not leased:
        return []
    row = conn.execute(
        "SELECT lonnymq_ack_v1(%s::bigint[], %s::uuid[])",
        [[r[0] for r in leased], [r[2] for r in leased]],
    ).fetchone()
    assert row is not None
    return sorted(int(i) for i in row[0])


def check(conn: psycopg.Connection[Any], grace_ms: int = 1000) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT channel_id, queue, channel, problem, detail FROM lonnymq_check_v2(%s)"
        " ORDER BY channel_id, problem",
        [grace_ms],
    ).fetchall()


def apply_marks(conn: psycopg.Connection[Any], queue: str) -> None:
    """Apply producers' committed wake-up marks, as the next dequeue of the queue would."""
    conn.execute("SELECT lonnymq_apply_marks_v1(%s, 50)", [queue])
    if not conn.autocommit:
        conn.commit()


def configure(conn: psycopg.Connection[Any], queue: str, channel: str, max_concurrency: int | None = None,
              release_interval_ms: int = 0) -> int:
    row = conn.execute(
        "SELECT lonnymq_configure_channel_v1(%s, %s, %s, %s, false)",
        [queue, channel, max_concurrency, release_interval_ms],
    ).fetchone()
    assert row is not None
    return int(row[0])


def channel_state(conn: psycopg.Connection[Any], queue: str, channel: str) -> dict[str, Any]:
    cur = conn.execute(
        "SELECT id, next_dequeue_at, last_dequeue_at, in_flight, turn FROM lonnymq_channel"
        " WHERE queue = %s AND name = %s",
        [queue, channel],
    )
    row = cur.fetchone()
    assert row is not None, f"no channel {queue}/{channel}"
    assert cur.description is not None
    return dict(zip([c.name for c in cur.description], row, strict=True))


def sqlstate(exc: BaseException) -> str | None:
    return getattr(exc, "sqlstate", None)
