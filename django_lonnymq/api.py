"""Enqueue and operate on the queue: each call is one SQL function call on ``connections[using]``.

Enqueue runs on the caller's connection, so inside ``transaction.atomic()`` the message
commits or rolls back with the caller's rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.db import connections
from django.utils import timezone

from . import eager, jsontext, limits, sql, tracing
from .conf import settings, to_ms
from .durations import duration_ms as _duration_ms
from .exceptions import InvalidArgument, PayloadError, PriorityWithSchedule, sql_errors
from .rates import Rate

try:
    import psycopg
except ImportError:  # psycopg2 users keep the client-side binding path
    psycopg = None  # type: ignore[assignment]

_UNSET: Any = object()
# One encoder for every payload (json.dumps builds one per call). ensure_ascii stays on, so
# the text's length is its size in bytes.
_JSON = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


@dataclass(frozen=True)
class Item:
    """One message for :func:`enqueue_many`; unset fields take the call's defaults."""

    payload: Any
    channel: str | None = None
    run_at: datetime | None = None
    delay: timedelta | float | None = None
    priority: int | None = None
    dedup_key: str | None = None
    max_attempts: int | None = None


# ---------------------------------------------------------------------------------------
# Validation: clear errors in Python before anything reaches the database
# ---------------------------------------------------------------------------------------


def _name(field: str, value: Any, max_length: int) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(field, "must be a string", value)
    if not 1 <= len(value) <= max_length:
        raise InvalidArgument(field, f"must be 1 to {max_length} characters", value)
    if "\x00" in value:
        raise InvalidArgument(field, "must not contain NUL characters", value)
    if not value.strip():
        raise InvalidArgument(field, "must not be only blanks", value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(field, "must be valid Unicode (it holds a lone surrogate)", value) from None
    return value


def _payload(value: Any, field: str = "payload") -> str:
    try:
        text = _JSON.encode(value)
    except RecursionError:
        raise PayloadError(
            field, "must not be nested deeper than about 1000 levels", type(value).__name__
        ) from None
    except (TypeError, ValueError) as exc:
        raise PayloadError(
            field,
            "must be JSON-serializable",
            type(value).__name__,
            message=f"{field} must be JSON-serializable: {exc}",
        ) from exc
    if jsontext.has_nul_escape(text):
        raise PayloadError(
            field, "must not contain NUL characters (PostgreSQL jsonb refuses them)", "\\u0000"
        )
    if ("\\ud" in text or "\\uD" in text) and jsontext.has_lone_surrogate(text):
        raise PayloadError(
            field, "must be valid Unicode (a string holds a lone surrogate)", "\\ud800-\\udfff"
        )
    limit = settings.MAX_PAYLOAD_BYTES
    size = len(text)  # ensure_ascii: one byte per character
    if size > limit:
        raise PayloadError(
            field,
            f"must be at most {limit} bytes as JSON (LONNYMQ_MAX_PAYLOAD_BYTES)",
            size,
            message=f"{field} is {size} bytes as JSON, more than LONNYMQ_MAX_PAYLOAD_BYTES={limit}",
        )
    return text


def _int(field: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(field, "must be an integer", value)
    if not low <= value <= high:
        raise InvalidArgument(field, f"must be between {low} and {high}", value)
    return value


def _epoch_ms(field: str, value: Any) -> int:
    if not isinstance(value, datetime):
        raise InvalidArgument(field, "must be a datetime", value)
    if timezone.is_naive(value):
        if getattr(django_settings, "USE_TZ", True):
            raise InvalidArgument(
                field,
                "must be timezone-aware when USE_TZ is on (use django.utils.timezone.now() or make_aware())",
                value,
            )
        value = timezone.make_aware(value, timezone.get_default_timezone())
    ms = int(value.timestamp() * 1000)
    if ms < 0:
        raise InvalidArgument(field, "must not be before 1970-01-01", value)
    if ms > now_ms() + to_ms(limits.MAX_AHEAD):
        raise InvalidArgument(field, "must be at most 100 years ahead", value)
    return ms


def _when(run_at: Any, delay: Any, priority: int) -> tuple[int | None, int | None]:
    if run_at is not None and delay is not None:
        raise InvalidArgument("run_at", "cannot be combined with delay", run_at)
    run_at_ms = _epoch_ms("run_at", run_at) if run_at is not None else None
    delay_ms = _duration_ms("delay", delay) if delay is not None else None
    if priority > 0:
        now_ms = int(timezone.now().timestamp() * 1000)
        if (delay_ms or 0) > 0 or (run_at_ms is not None and run_at_ms > now_ms):
            raise PriorityWithSchedule(
                "priority",
                "cannot be combined with a future run time",
                priority,
                message=f"priority {priority} cannot be combined with a future run time: "
                "priority moves a message earlier, a scheduled message has no earlier slot",
            )
    return run_at_ms, delay_ms


def _alias(using: str | None) -> str:
    """The database alias of a call: ``using``, or ``LONNYMQ_DATABASE`` when None."""
    if using is None:
        return str(settings.DATABASE)
    if not isinstance(using, str) or using not in connections.settings:
        raise InvalidArgument(
            "using", f"must name a database alias in DATABASES ({', '.join(connections)})", using
        )
    return using


def _common() -> dict[str, int]:
    return {
        "priority_step_ms": settings.ms("PRIORITY_STEP"),
        "tolerance_ms": settings.ms("WAKE_TOLERANCE"),
    }


def _connected(using: str | None) -> Any:
    """Django's connection wrapper for ``using``, connected (as ``cursor()`` would leave it)."""
    wrapper = connections[_alias(using)]
    wrapper.close_if_health_check_failed()
    wrapper.ensure_connection()
    return wrapper


def _call(using: str | None, name: str, params: Mapping[str, Any]) -> Any:
    """Run one named statement on the caller's connection and return its one value.

    Django's psycopg backend binds on the client and prepares nothing, which keeps
    transaction-mode poolers working. A project that turns prepared statements on
    (``OPTIONS["prepare_threshold"]``) gets them here too: the statement then binds on the
    server and psycopg prepares it once per connection, which spares the server parsing and
    planning it on every call (about 50 us of a single enqueue's 700 here).
    """
    wrapper = _connected(using)
    if psycopg is not None and getattr(wrapper.connection, "prepare_threshold", None) is not None:
        return _call_on_server(wrapper, sql.query(name), params)
    with sql_errors(), wrapper.cursor() as cursor:
        cursor.execute(sql.query(name), params)
        row = cursor.fetchone()
    return row[0] if row else None


def _call_with_arrays(using: str | None, name: str, params: Mapping[str, Any]) -> Any:
    """:func:`_call` for a statement with array parameters, which go in binary.

    Django's psycopg backend binds on the client by default, quoting a payload array
    element by element (about 2.5 ms per 100 JSON payloads). This binds on the server
    whatever the settings. Other drivers keep the plain path.
    """
    wrapper = _connected(using)
    if psycopg is None or not isinstance(wrapper.connection, psycopg.Connection):
        return _call(using, name, params)
    return _call_on_server(wrapper, sql.binary_arrays(sql.query(name)), params)


def _call_on_server(wrapper: Any, statement: str, params: Mapping[str, Any]) -> Any:
    """Run ``statement`` on a server-binding cursor over Django's own psycopg connection.

    It stays in the caller's transaction and goes through Django's cursor wrapper (error
    wrapping, query logging), as ``connection.cursor()`` would.
    """
    wrapper.validate_thread_sharing()
    raw = psycopg.Cursor(wrapper.connection)
    cursor = wrapper.make_debug_cursor(raw) if wrapper.queries_logged else wrapper.make_cursor(raw)
    with sql_errors(), cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
    return row[0] if row else None


# ---------------------------------------------------------------------------------------
# Enqueue
# ---------------------------------------------------------------------------------------


def enqueue(
    queue: str,
    payload: Any,
    *,
    channel: str = "default",
    run_at: datetime | None = None,
    delay: timedelta | float | None = None,
    priority: int = 0,
    dedup_key: str | None = None,
    max_attempts: int | None = None,
    using: str | None = None,
) -> int:
    """Enqueue one message into ``queue``/``channel``; returns its id.

    Runs on the caller's connection and transaction. ``run_at`` (aware datetime) or ``delay``
    schedules it; ``priority`` (0-100) acts as "enqueued priority x LONNYMQ_PRIORITY_STEP
    earlier". A repeated ``dedup_key`` in the same channel returns the existing id.
    """
    _name("queue", queue, 100)
    _name("channel", channel, 200)
    priority = _int("priority", priority, 0, 100)
    run_at_ms, delay_ms = _when(run_at, delay, priority)
    if dedup_key is not None:
        _name("dedup_key", dedup_key, 200)
    attempts = _int("max_attempts", settings.MAX_ATTEMPTS if max_attempts is None else max_attempts, 1, 1000)
    params = {
        "queue": queue,
        "channel": channel,
        "payload": _payload(payload),
        "run_at_ms": run_at_ms,
        "delay_ms": delay_ms,
        "priority": priority,
        "dedup_key": dedup_key,
        "max_attempts": attempts,
        **_common(),
    }
    with tracing.enqueuing(queue, channel) as traced:
        if traced.context is None:
            message_id = int(_call(using, "enqueue", params))
        else:
            message_id = int(_call(using, "enqueue_traced", {**params, "context": traced.context}))
        traced([message_id])
    if eager.enabled():
        eager.after_enqueue(queue, [message_id], _alias(using))
    return message_id


def enqueue_many(
    queue: str,
    items: Iterable[Item | Any],
    *,
    channel: str = "default",
    run_at: datetime | None = None,
    delay: timedelta | float | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    using: str | None = None,
) -> list[int]:
    """Enqueue many messages of one queue, any channels, in one round trip.

    Each item is an :class:`Item` or a bare payload (which takes the keyword defaults).
    Returns the ids in input order. All or nothing: one bad item fails the whole call.
    """
    _name("queue", queue, 100)
    _name("channel", channel, 200)
    if isinstance(items, (str, bytes, bytearray, Mapping, set, frozenset)) or not isinstance(items, Iterable):
        raise InvalidArgument("items", "must be a list, tuple or iterator of items", type(items).__name__)
    _alias(using)
    default_attempts = _int(
        "max_attempts", settings.MAX_ATTEMPTS if max_attempts is None else max_attempts, 1, 1000
    )
    channels: list[str] = []
    payloads: list[str] = []
    run_ats: list[int | None] = []
    delays: list[int | None] = []
    priorities: list[int] = []
    dedup_keys: list[str | None] = []
    attempts: list[int] = []
    for index, raw in enumerate(items):
        item = raw if isinstance(raw, Item) else Item(payload=raw)
        where = f"items[{index}]"
        item_channel = _name(f"{where}.channel", item.channel if item.channel is not None else channel, 200)
        item_priority = _int(
            f"{where}.priority", priority if item.priority is None else item.priority, 0, 100
        )
        item_run_at = item.run_at if item.run_at is not None or item.delay is not None else run_at
        item_delay = item.delay if item.run_at is not None or item.delay is not None else delay
        run_at_ms, delay_ms = _when(item_run_at, item_delay, item_priority)
        if item.dedup_key is not None:
            _name(f"{where}.dedup_key", item.dedup_key, 200)
        channels.append(item_channel)
        payloads.append(_payload(item.payload, f"{where}.payload"))
        run_ats.append(run_at_ms)
        delays.append(delay_ms)
        priorities.append(item_priority)
        dedup_keys.append(item.dedup_key)
        attempts.append(
            default_attempts
            if item.max_attempts is None
            else _int(f"{where}.max_attempts", item.max_attempts, 1, 1000)
        )
    if not payloads:
        return []
    params = {
        "queue": queue,
        "channels": channels,
        "payloads": payloads,
        # All-default columns go as NULL: the SQL function then takes its set-based fast path.
        "run_at_ms": run_ats if any(x is not None for x in run_ats) else None,
        "delay_ms": delays if any(x is not None for x in delays) else None,
        "priorities": priorities if any(priorities) else None,
        "dedup_keys": dedup_keys if any(x is not None for x in dedup_keys) else None,
        "max_attempts": attempts,
        "default_max_attempts": default_attempts,
        **_common(),
    }
    with tracing.enqueuing(queue, None) as traced:
        if traced.context is None:
            ids = [int(i) for i in _call_with_arrays(using, "enqueue_many", params)]
        else:
            traced_params = {**params, "context": traced.context}
            ids = [int(i) for i in _call_with_arrays(using, "enqueue_many_traced", traced_params)]
        traced(ids)
    if eager.enabled():
        eager.after_enqueue(queue, ids, _alias(using))
    return ids


# ---------------------------------------------------------------------------------------
# Operations (the admin, the management commands and users' scripts use these)
# ---------------------------------------------------------------------------------------


def _ids(ids: Iterable[int], field: str = "ids") -> list[int]:
    if isinstance(ids, (str, bytes, bytearray, Mapping)) or not isinstance(ids, Iterable):
        raise InvalidArgument(field, "must be a list, tuple or iterator of message ids", ids)
    out = []
    for value in ids:
        out.append(_id(field, value))
    return out


def _id(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(field, "must be integers", value)
    if not 1 <= value <= limits.MAX_ID:
        raise InvalidArgument(field, f"must be between 1 and {limits.MAX_ID}", value)
    return value


def configure_channel(
    queue: str,
    channel: str,
    *,
    max_concurrency: int | None = _UNSET,
    release_interval: timedelta | float | None = _UNSET,
    paused: bool | None = _UNSET,
    weight: int = _UNSET,
    rate: Rate | str | None = _UNSET,
    using: str | None = None,
) -> int:
    """Create or change a channel's limits; omitted ones keep their value. Returns its id.

    ``max_concurrency=None`` means unlimited; ``release_interval`` is the least time between
    two releases; ``weight`` (1 to 1000) is how many messages the channel releases per round
    under backlog; ``rate`` is a token bucket, a :class:`~django_lonnymq.rates.Rate` or its
    text (``"100 / min, burst 20"``), ``None`` for none. Takes effect on the next dequeue.
    Only the limits given are written, under the channel's row lock, so a concurrent change
    of another limit is never overwritten.
    """
    _name("queue", queue, 100)
    _name("channel", channel, 200)
    unlimited = max_concurrency is None
    if max_concurrency is _UNSET or max_concurrency is None:
        max_concurrency = None
    else:
        max_concurrency = _int("max_concurrency", max_concurrency, 1, 2_147_483_647)
    if release_interval is _UNSET:
        interval_ms = None
    else:
        interval_ms = (
            0
            if release_interval is None
            else _duration_ms("release_interval", release_interval, limits.MAX_INTERVAL)
        )
    if paused is _UNSET:
        paused = None
    elif not isinstance(paused, bool):
        raise InvalidArgument("paused", "must be a boolean", paused)
    weight_checked = None if weight is _UNSET else _int("weight", weight, 1, 1000)
    bucket = None if rate is _UNSET or rate is None else Rate.of(rate)
    params = {
        "queue": queue,
        "channel": channel,
        "max_concurrency": max_concurrency,
        "unlimited": unlimited,
        "release_interval_ms": interval_ms,
        "paused": paused,
        "weight": weight_checked,
        "rate_count": bucket.count if bucket else None,
        "rate_period_ms": bucket.period_ms if bucket else None,
        "rate_burst": bucket.burst if bucket else None,
        "no_rate": rate is None,
    }
    return int(_call(using, "configure_channel", params))


def configure_queue(
    queue: str,
    *,
    max_concurrency: int | None = _UNSET,
    rate: Rate | str | None = _UNSET,
    using: str | None = None,
) -> bool:
    """Set or change a queue's queue-wide limits; omitted ones keep their value.

    ``max_concurrency`` caps the queue's messages in flight across all its workers and
    channels (``None``: no cap); ``rate`` is a token bucket for the whole queue, a
    :class:`~django_lonnymq.rates.Rate` or its text (``"50 / s, burst 10"``; ``None``: none).
    A queue with neither pays nothing for them. Returns whether the queue has a limit now.
    """
    _name("queue", queue, 100)
    unlimited = max_concurrency is None
    if max_concurrency is _UNSET or max_concurrency is None:
        max_concurrency = None
    else:
        max_concurrency = _int("max_concurrency", max_concurrency, 1, 2_147_483_647)
    bucket = None if rate is _UNSET or rate is None else Rate.of(rate)
    params = {
        "queue": queue,
        "max_concurrency": max_concurrency,
        "unlimited": unlimited,
        "rate_count": bucket.count if bucket else None,
        "rate_period_ms": bucket.period_ms if bucket else None,
        "rate_burst": bucket.burst if bucket else None,
        "no_rate": rate is None,
    }
    return bool(_call(using, "configure_queue", params))


def requeue_dead(ids: Iterable[int], *, reset_attempts: bool = True, using: str | None = None) -> list[int]:
    """Move dead messages back into their channels, ready now. Returns the ids requeued."""
    params = {"ids": _ids(ids), "reset_attempts": bool(reset_attempts), **_common()}
    return list(_call(using, "requeue_dead", params))


def cancel(ids: Iterable[int], *, missing_ok: bool = False, using: str | None = None) -> list[int]:
    """Cancel messages. Returns the ids cancelled.

    A waiting (ready or scheduled) message is deleted at once. A running one is marked:
    its worker learns it at its next heartbeat, sets ``message.cancel_requested`` (a
    cooperative handler stops there), interrupts the handler after ``LONNYMQ_CANCEL_GRACE``
    and moves the message to the dead letters with reason ``cancelled`` (``requeue_dead``
    brings it back). An id that names no message raises
    :class:`~django_lonnymq.exceptions.UnknownMessage` and cancels nothing, unless
    ``missing_ok`` (then such ids are left out of the result).
    """
    return [row[0] for row in cancel_rows(ids, missing_ok=missing_ok, using=using)]


def cancel_rows(
    ids: Iterable[int], *, missing_ok: bool = False, using: str | None = None
) -> list[tuple[int, bool]]:
    """:func:`cancel`, with whether each message was running: ``[(id, running), ...]``."""
    params = {"ids": _ids(ids), "missing_ok": bool(missing_ok)}
    wrapper = _connected(using)
    with sql_errors(), wrapper.cursor() as cursor:
        cursor.execute(sql.query("cancel"), params)
        return [(int(row[0]), bool(row[1])) for row in cursor.fetchall()]


def run_now(ids: Iterable[int], *, using: str | None = None) -> list[int]:
    """Make scheduled or backed-off messages ready now. Returns the ids moved."""
    return list(_call(using, "run_now", {"ids": _ids(ids), **_common()}))


def purge_channel(channel_id: int, *, using: str | None = None) -> int:
    """Delete every message of a channel that is not in flight. Returns how many."""
    return int(_call(using, "purge_channel", {"channel_id": _id("channel_id", channel_id)}))


def delete_channel(channel_id: int, *, using: str | None = None) -> str:
    """Delete a channel that holds no message and that no producer or dequeuer holds now.

    Returns ``"deleted"``, ``"missing"``, ``"not_empty"`` or ``"busy"`` (try again). Its dead
    messages stay; requeueing them recreates the channel.
    """
    return str(_call(using, "delete_channel", {"id": _id("channel_id", channel_id)}))


def purge_dead(ids: Iterable[int], *, using: str | None = None) -> list[int]:
    """Delete dead messages for good. Returns the ids deleted."""
    return list(_call(using, "purge_dead", {"ids": _ids(ids)}))


def reap(*, limit: int = 500, using: str | None = None) -> int:
    """Recover expired leases now (workers do this on their own). Returns how many."""
    params = {
        "limit": _int("limit", limit, 1, 100_000),
        "dedup_window_ms": settings.ms("DEDUP_WINDOW"),
        "tolerance_ms": settings.ms("WAKE_TOLERANCE"),
    }
    return int(_call(using, "reap", params))


@dataclass(frozen=True)
class Problem:
    """A broken scheduler invariant reported by :func:`check` (a queue-wide one has no channel)."""

    channel_id: int | None
    queue: str
    channel: str | None
    problem: str
    detail: str


def check(*, grace: timedelta | float = 1.0, using: str | None = None) -> list[Problem]:
    """The channels (and queue-wide caps) whose scheduler state disagrees with their messages
    (empty: healthy)."""
    with sql_errors(), connections[_alias(using)].cursor() as cursor:
        cursor.execute(sql.query("check"), {"grace_ms": _duration_ms("grace", grace, limits.MAX_LEASE)})
        return [Problem(*row) for row in cursor.fetchall()]


def now_ms() -> int:
    """The current time as the queue counts it (ms since the epoch)."""
    return int(timezone.now().timestamp() * 1000)


# ---------------------------------------------------------------------------------------
# Async views
# ---------------------------------------------------------------------------------------


async def aenqueue(queue: str, payload: Any, **options: Any) -> int:
    """:func:`enqueue` for async code (async views, async tasks); same arguments.

    It runs where Django's async ORM calls run (``sync_to_async(thread_sensitive=True)``),
    so it uses the same connection: outside a transaction it commits at once, like
    ``await Model.objects.acreate()``. Django has no async ``atomic()``: to enqueue in the
    same transaction as other writes, put them and a plain :func:`enqueue` in one sync
    function and ``await sync_to_async(that_function)()``.
    """
    return int(await sync_to_async(enqueue, thread_sensitive=True)(queue, payload, **options))


async def aenqueue_many(queue: str, items: Iterable[Item | Any], **options: Any) -> list[int]:
    """:func:`enqueue_many` for async code; see :func:`aenqueue` for the transaction rules."""
    if not isinstance(items, (list, tuple)):  # a generator must be read here, not in another thread
        if isinstance(items, (str, bytes, bytearray, Mapping, set, frozenset)) or not isinstance(
            items, Iterable
        ):
            raise InvalidArgument("items", "must be a list, tuple or iterator of items", type(items).__name__)
        items = list(items)
    return list(await sync_to_async(enqueue_many, thread_sensitive=True)(queue, items, **options))
