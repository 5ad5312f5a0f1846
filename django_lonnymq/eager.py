"""Eager mode, for tests: a message's handler runs in-process as soon as its enqueue commits.

Turned on by ``LONNYMQ_EAGER = True`` or ``with django_lonnymq.testing.eager():``. The
message is still written by the real SQL function and then processed on the caller's own
connection through the real dequeue, ack and fail functions, so retries, backoff counting
and dead letters behave as with a worker; only the waiting is left out (a retry runs again at
once, a scheduled message runs at once).

When it runs: when the enqueuing transaction commits (``transaction.on_commit``); at once
when there is no transaction; and at once inside a Django ``TestCase``, whose transaction
never commits (its atomic blocks are the test's own), so the handler's effects are visible
as soon as the enqueuing code returns and a rolled-back ``atomic()`` inside the test runs
nothing.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from asgiref.sync import async_to_sync
from django.db import connections, transaction

from . import sql
from .conf import settings
from .exceptions import Discard, Retry, sql_errors
from .message import Message

logger = logging.getLogger("django_lonnymq.eager")

_forced: contextvars.ContextVar[bool] = contextvars.ContextVar("lonnymq_eager", default=False)
# A message that cannot be delivered now (a paused or capped channel) is left after this many
# empty dequeues instead of spinning.
_EMPTY_TRIES = 3


def enabled() -> bool:
    return _forced.get() or bool(settings.EAGER)


@contextmanager
def forced() -> Iterator[None]:
    token = _forced.set(True)
    try:
        yield
    finally:
        _forced.reset(token)


def after_enqueue(queue: str, ids: Sequence[int], alias: str) -> None:
    """Run ``ids`` now or when the enqueuing transaction commits (see the module's docstring)."""
    conn = connections[alias]
    if not ids:
        return
    if not conn.in_atomic_block or all(getattr(a, "_from_testcase", False) for a in conn.atomic_blocks):
        run(queue, list(ids), alias)
    else:
        transaction.on_commit(lambda: run(queue, list(ids), alias), using=alias)


def run(queue: str, ids: list[int], alias: str) -> None:
    """Deliver the queue's due messages on this connection until ``ids`` are acked or dead."""
    from .registry import autodiscover, get_handler

    autodiscover()
    handle = get_handler(queue)
    conn = connections[alias]
    waiting = set(ids)
    empty = 0
    while waiting and empty < _EMPTY_TRIES:
        _call(conn, "run_now", {"ids": sorted(waiting), "tolerance_ms": settings.ms("WAKE_TOLERANCE")})
        rows = _rows(conn, "dequeue", {"queue": queue, "batch_size": 100, "lease_ms": settings.ms("LEASE"),
                                       "worker": "eager", "tolerance_ms": settings.ms("WAKE_TOLERANCE")})  # fmt: skip
        if not rows:
            empty += 1
            continue
        empty = 0
        for row in rows:
            if _deliver(conn, handle, queue, row) != "retry":
                waiting.discard(row[0])
    if waiting:
        logger.warning("eager mode left message(s) %s of %s undelivered (channel paused or at its cap?)",
                       sorted(waiting), queue)  # fmt: skip


def _deliver(conn: Any, handle: Any, queue: str, row: tuple[Any, ...]) -> str:
    from .registry import is_async

    msg_id, channel, payload, attempts, max_attempts, priority, dedup_key, enqueued_at, token, lease_until = (
        row
    )
    if isinstance(payload, str):  # Django's connection leaves jsonb as text (JSONField decodes it)
        payload = json.loads(payload)
    message = Message(id=msg_id, queue=queue, channel=channel, payload=payload, attempt=attempts,
                      max_attempts=max_attempts, enqueued_at=enqueued_at, priority=priority,
                      dedup_key=dedup_key, lease_token=token, lease_until_ms=lease_until)  # fmt: skip
    error: str | None = None
    retry_ms: int | None = None
    discard = False
    try:
        # A savepoint: a failing handler's writes go, as its failed transaction would.
        with transaction.atomic(using=conn.alias):
            if is_async(handle):
                async_to_sync(handle)(message)
            else:
                handle(message)
    except Retry as request:
        error, retry_ms = request.reason or "retry requested", 0
    except Discard as request:
        error, discard = request.reason, True
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    if error is None:
        _call(conn, "ack", {"ids": [msg_id], "tokens": [str(token)]})
        return "ack"
    return str(
        _call(
            conn,
            "fail",
            {
                "id": msg_id,
                "token": str(token),
                "error": error,
                "retry_delay_ms": retry_ms,
                "reason": "discarded" if discard else "failed",
                "backoff_base_ms": 0,
                "backoff_max_ms": 0,
                "tolerance_ms": settings.ms("WAKE_TOLERANCE"),
            },
        )  # fmt: skip
    )


def _rows(conn: Any, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with sql_errors(), conn.cursor() as cursor:
        cursor.execute(sql.query(name), params)
        return list(cursor.fetchall())


def _call(conn: Any, name: str, params: dict[str, Any]) -> Any:
    found = _rows(conn, name, params)
    return found[0][0] if found else None
