"""Small helpers that call the queue's named queries (django_lonnymq/sql/queries.sql).

Every helper takes an optional ``conn``: a raw psycopg connection (from the ``connect``
fixture) or, by default, Django's ``connection`` (the test's own transaction).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection

from django_lonnymq import api, sql
from django_lonnymq.exceptions import sql_errors

LEASE_MS = 30_000
JSONB_OID = 3802


def _cursor(conn: Any = None) -> Any:
    return (conn or connection).cursor()


def rows(statement: str, params: Any = None, conn: Any = None) -> list[dict[str, Any]]:
    """Run a statement; its rows as dicts."""
    with sql_errors(), _cursor(conn) as cursor:
        cursor.execute(statement, params)
        if cursor.description is None:
            return []
        names = [col[0] for col in cursor.description]
        json_columns = [col[0] for col in cursor.description if col[1] == JSONB_OID]
        found = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    if conn is None:
        # Django's backend leaves jsonb as text (its JSONField decodes it); decode it here
        # so rows look the same whichever connection ran them.
        for row in found:
            for name in json_columns:
                if row[name] is not None:
                    row[name] = json.loads(row[name])
    return found


def scalar(statement: str, params: Any = None, conn: Any = None) -> Any:
    found = rows(statement, params, conn)
    return next(iter(found[0].values())) if found else None


def named(name: str, conn: Any = None, **params: Any) -> Any:
    """The first column of the first row of a named query."""
    return scalar(sql.query(name), params, conn)


# ---------------------------------------------------------------------------------------
# The queue's functions
# ---------------------------------------------------------------------------------------


def enqueue_sql(
    queue: str,
    payload: str = "{}",
    *,
    channel: str = "default",
    run_at_ms: int | None = None,
    delay_ms: int | None = None,
    priority: int = 0,
    dedup_key: str | None = None,
    on_duplicate: str | None = "skip",
    max_attempts: int = 5,
    priority_step_ms: int = 1000,
    tolerance_ms: int = 50,
    cost: int = 1,
    slots: int = 1,
    conn: Any = None,
) -> int:
    """``lonnymq_enqueue_v4`` straight, no Python validation (payload is JSON text)."""
    return int(
        named(
            "enqueue",
            conn,
            queue=queue,
            channel=channel,
            payload=payload,
            run_at_ms=run_at_ms,
            delay_ms=delay_ms,
            priority=priority,
            dedup_key=dedup_key,
            on_duplicate=on_duplicate,
            max_attempts=max_attempts,
            priority_step_ms=priority_step_ms,
            tolerance_ms=tolerance_ms,
            cost=cost,
            slots=slots,
        )
    )


def dequeue(
    queue: str, batch: int = 1, lease_ms: int = LEASE_MS, *, worker: str = "test", conn: Any = None
) -> list[dict[str, Any]]:
    return rows(
        sql.query("dequeue"),
        {"queue": queue, "batch_size": batch, "lease_ms": lease_ms, "worker": worker, "tolerance_ms": 50},
        conn,
    )


def ack(leased: Sequence[dict[str, Any]], conn: Any = None) -> list[int]:
    return sorted(
        named("ack", conn, ids=[r["id"] for r in leased], tokens=[r["lease_token"] for r in leased])
    )


def fail(
    leased: dict[str, Any],
    error: str | None = "boom",
    *,
    retry_delay_ms: int | None = None,
    discard: bool = False,
    reason: str | None = None,
    backoff_base_ms: int = 1000,
    backoff_max_ms: int = 3_600_000,
    conn: Any = None,
) -> str:
    return str(
        named(
            "fail",
            conn,
            id=leased["id"],
            token=leased["lease_token"],
            error=error,
            retry_delay_ms=retry_delay_ms,
            reason=reason if reason is not None else ("discarded" if discard else "failed"),
            backoff_base_ms=backoff_base_ms,
            backoff_max_ms=backoff_max_ms,
            tolerance_ms=50,
        )
    )


def extend(leased: Sequence[dict[str, Any]], lease_ms: int, conn: Any = None) -> list[int]:
    """The ids whose lease was extended (see :func:`heartbeat` for the cancel flags)."""
    return sorted(heartbeat(leased, lease_ms, conn))


def heartbeat(leased: Sequence[dict[str, Any]], lease_ms: int, conn: Any = None) -> dict[int, bool]:
    """The worker's heartbeat: ``{id extended: cancel_requested}``."""
    found = rows(
        sql.query("extend"),
        {"ids": [r["id"] for r in leased], "tokens": [r["lease_token"] for r in leased], "lease_ms": lease_ms},
        conn,
    )
    return {r["id"]: r["cancel_requested"] for r in found}


def release(leased: Sequence[dict[str, Any]], conn: Any = None) -> list[int]:
    return sorted(
        named(
            "release",
            conn,
            ids=[r["id"] for r in leased],
            tokens=[r["lease_token"] for r in leased],
            tolerance_ms=50,
        )
    )


def reap(limit: int = 500, conn: Any = None) -> int:
    return int(named("reap", conn, limit=limit, dedup_window_ms=86_400_000, tolerance_ms=50))


def configure(
    queue: str,
    channel: str,
    max_concurrency: int | None = None,
    release_interval_ms: int = 0,
    paused: bool = False,
    conn: Any = None,
    weight: int | None = None,
    rate: tuple[int, int, int] | None = None,
) -> int:
    """``rate``: (count, period_ms, burst); None leaves the channel's rate as it is."""
    count, period_ms, burst = rate or (None, None, None)
    return int(
        named(
            "configure_channel",
            conn,
            queue=queue,
            channel=channel,
            max_concurrency=max_concurrency,
            unlimited=max_concurrency is None,
            release_interval_ms=release_interval_ms,
            paused=paused,
            weight=weight,
            rate_count=count,
            rate_period_ms=period_ms,
            rate_burst=burst,
            no_rate=False,
            plan=None,
            no_plan=False,
            inherit=None,
        )
    )


# ---------------------------------------------------------------------------------------
# Looking at the tables
# ---------------------------------------------------------------------------------------


def db_now_ms(conn: Any = None) -> int:
    return int(scalar("SELECT lonnymq_now_ms_v1()", None, conn))


def channel_row(queue: str, name: str = "default", conn: Any = None) -> dict[str, Any] | None:
    found = rows("SELECT * FROM lonnymq_channel WHERE queue = %s AND name = %s", [queue, name], conn)
    return found[0] if found else None


def message_row(message_id: int, conn: Any = None) -> dict[str, Any] | None:
    found = rows("SELECT * FROM lonnymq_message WHERE id = %s", [message_id], conn)
    return found[0] if found else None


def dead_row(message_id: int, conn: Any = None) -> dict[str, Any] | None:
    found = rows("SELECT * FROM lonnymq_dead_message WHERE id = %s", [message_id], conn)
    return found[0] if found else None


def messages_of(queue: str, conn: Any = None) -> list[dict[str, Any]]:
    return rows(
        "SELECT m.*, c.name AS channel_name FROM lonnymq_message m"
        " JOIN lonnymq_channel c ON c.id = m.channel_id WHERE c.queue = %s ORDER BY m.id",
        [queue],
        conn,
    )


def counts(conn: Any = None) -> dict[str, int]:
    """Rows in each of the app's tables, every ``lonnymq_*`` one (to show that a refused call
    wrote nothing)."""
    tables = [
        row["tablename"]
        for row in rows(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            " AND tablename LIKE 'lonnymq%%' ORDER BY 1",
            None,
            conn,
        )
    ]
    return {table: int(scalar(f"SELECT count(*) FROM {table}", None, conn)) for table in tables}


def ids(found: Iterable[dict[str, Any]]) -> list[int]:
    return [r["id"] for r in found]


def assert_healthy(grace: float = 0.1) -> None:
    """The scheduler's own invariant check finds nothing wrong."""
    problems = api.check(grace=grace)
    assert problems == [], f"lonnymq_check_v2 found problems: {problems}"
