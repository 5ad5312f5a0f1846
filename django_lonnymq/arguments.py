"""Argument checks: a clear, typed error in Python before anything reaches the database.

Every public entry point (the API, topics, the Tasks backend, schedules, the admin's forms)
checks its arguments here, against the bounds of :mod:`django_lonnymq.bounds`; the schema
checks the same numbers again. The error names the field, the rule and the value.

Imports no Django at import time (settings and time zones are looked up inside the checks
that need them), so code without Django settings can use the name and payload checks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from . import bounds, jsontext
from .durations import duration_ms
from .exceptions import InvalidArgument, PayloadError, PriorityWithSchedule

__all__ = [
    "collection",
    "duration_ms",
    "epoch_ms",
    "integer",
    "message_id",
    "message_ids",
    "name",
    "now_ms",
    "payload",
    "queue",
    "channel",
    "dedup_key",
    "when",
]

# One encoder for every payload (json.dumps builds one per call). ensure_ascii stays on, so
# the text's length is its size in bytes.
_JSON = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def name(field: str, value: Any, max_length: int) -> str:
    """A name: a string of 1 to ``max_length`` characters, not only blanks, no NUL, valid Unicode."""
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


def queue(value: Any, field: str = "queue") -> str:
    return name(field, value, bounds.MAX_QUEUE_NAME)


def channel(value: Any, field: str = "channel") -> str:
    return name(field, value, bounds.MAX_CHANNEL_NAME)


# Dedup keys the queue writes itself (periodic ticks, workflow steps): a worker reads a
# message by them, so a caller's key may not start so.
RESERVED_DEDUP_PREFIX = "lonnymq."


def dedup_key(value: Any, field: str = "dedup_key") -> str | None:
    if value is None:
        return None
    key = name(field, value, bounds.MAX_DEDUP_KEY)
    if key.startswith(RESERVED_DEDUP_PREFIX):
        raise InvalidArgument(
            field,
            f"must not start with {RESERVED_DEDUP_PREFIX!r} (the queue's own keys: ticks, workflow steps)",
            value,
        )
    return key


# What a repeated dedup key does (docs/flow-control.md): "skip" keeps the key's message as it
# is, "replace" (debounce) gives a waiting one the new payload and run time, "update"
# (throttle) the new payload only.
ON_DUPLICATE = bounds.DEDUP_MODES


def on_duplicate(value: Any, key: str | None, field: str = "on_duplicate") -> str:
    """A dedup mode; one other than "skip" needs a dedup key."""
    if not isinstance(value, str) or value not in ON_DUPLICATE:
        raise InvalidArgument(field, "must be skip, replace or update", value)
    if value != "skip" and key is None:
        raise InvalidArgument(field, "needs a dedup_key", value)
    return value


def default_on_duplicate(value: Any) -> str:
    """A batch's ``on_duplicate``: the mode of its items that set a dedup key and no mode of
    their own (so it needs no key of its own)."""
    if not isinstance(value, str) or value not in ON_DUPLICATE:
        raise InvalidArgument("on_duplicate", "must be skip, replace or update", value)
    return value


def batch_item(
    where: str, payload_value: Any, dedup: str | None, mode: str | None, default_mode: str
) -> tuple[str, str | None, str]:
    """The checks every item of a batch (``enqueue_many``'s items, ``publish_many``'s events)
    shares: its payload as JSON text, its dedup key, and its dedup mode (its own, else the
    batch's when it has a key, else "skip"). ``where`` names the item (``items[3]``)."""
    if dedup is not None:
        dedup_key(dedup, f"{where}.dedup_key")
    if mode is not None:
        mode = on_duplicate(mode, dedup, f"{where}.on_duplicate")
    else:
        mode = default_mode if dedup is not None else "skip"
    return payload(payload_value, f"{where}.payload"), dedup, mode


def payload(value: Any, field: str = "payload", *, max_bytes: int | None = None) -> str:
    """``value`` as the JSON text the queue stores; ``max_bytes`` defaults to
    ``LONNYMQ_MAX_PAYLOAD_BYTES``. At most ``bounds.MAX_PAYLOAD_DEPTH`` levels deep (a
    worker decodes it with Python's json, which recurses once per level)."""
    try:
        text = _JSON.encode(value)
    except RecursionError:
        raise _too_deep(field, _object_depth(value)) from None
    except (TypeError, ValueError) as exc:
        raise PayloadError(
            field,
            "must be JSON-serializable",
            type(value).__name__,
            message=f"{field} must be JSON-serializable: {exc}{_serializable_hint(value, exc)}",
        ) from exc
    if "{" in text:  # only a payload holding an object can have a key that is not a string
        _string_keys(value, field)
    if jsontext.has_nul_escape(text):
        raise PayloadError(
            field, "must not contain NUL characters (PostgreSQL jsonb refuses them)", "\\u0000"
        )
    if ("\\ud" in text or "\\uD" in text) and jsontext.has_lone_surrogate(text):
        raise PayloadError(
            field, "must be valid Unicode (a string holds a lone surrogate)", "\\ud800-\\udfff"
        )
    if max_bytes is None:
        from .conf import settings

        max_bytes = int(settings.MAX_PAYLOAD_BYTES)
    size = len(text)  # ensure_ascii: one byte per character
    if size > max_bytes:
        raise PayloadError(
            field,
            f"must be at most {max_bytes} bytes as JSON (LONNYMQ_MAX_PAYLOAD_BYTES)",
            size,
            message=f"{field} is {size} bytes as JSON, more than LONNYMQ_MAX_PAYLOAD_BYTES={max_bytes}",
        )
    too_deep = jsontext.deeper_than(text, bounds.MAX_PAYLOAD_DEPTH)
    if too_deep is not None:
        raise _too_deep(field, too_deep)
    # What the schema checks: the jsonb's size, at most 8 bytes a character of text (plus
    # the headers), so only a long text is measured.
    if 8 * size + 16 > bounds.MAX_STORED_JSONB:
        stored = jsontext.jsonb_size(text)
        if stored > bounds.MAX_STORED_JSONB:
            limit = bounds.MAX_STORED_JSONB
            raise PayloadError(
                field,
                f"must take at most {limit} bytes as stored by PostgreSQL (jsonb)",
                stored,
                message=f"{field} takes {stored} bytes as stored by PostgreSQL (jsonb, {size} bytes as JSON), "
                f"more than the {limit} allowed",
            )
    return text


def _too_deep(field: str, depth: int) -> PayloadError:
    limit = bounds.MAX_PAYLOAD_DEPTH
    return PayloadError(
        field,
        f"must be nested at most {limit} levels deep (the root is level 0)",
        depth,
        message=f"{field} is nested {depth} levels deep, more than the {limit} allowed (the root is level 0)",
    )


def _object_depth(value: Any) -> int:
    """The level of the deepest value of a JSON-like object, without recursion (a payload
    the encoder found too deep). Each container is counted once, so a cycle ends too."""
    deepest = 0
    seen: set[int] = set()
    stack = [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children: Iterable[Any] = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        if id(node) in seen or not children:
            continue
        seen.add(id(node))
        deepest = max(deepest, level + 1)
        stack.extend((child, level + 1) for child in children)
    return deepest


def integer(field: str, value: Any, low: int, high: int) -> int:
    """An int (not a bool) from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(field, "must be an integer", value)
    if not low <= value <= high:
        raise InvalidArgument(field, f"must be between {low} and {high}", value)
    return value


def message_id(field: str, value: Any) -> int:
    """A message (or channel) id: a positive bigint."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(field, "must be integers", value)
    if not 1 <= value <= bounds.MAX_ID:
        raise InvalidArgument(field, f"must be between 1 and {bounds.MAX_ID}", value)
    return value


def message_ids(ids: Iterable[int], field: str = "ids") -> list[int]:
    """A list, tuple or iterator of message ids."""
    if isinstance(ids, (str, bytes, bytearray, Mapping)) or not isinstance(ids, Iterable):
        raise InvalidArgument(field, "must be a list, tuple or iterator of message ids", ids)
    return [message_id(field, value) for value in ids]


def collection(field: str, value: Any, of: str) -> Any:
    """A list, tuple or iterator (not a string, mapping or set): ``of`` says of what."""
    if isinstance(value, (str, bytes, bytearray, Mapping, set, frozenset)) or not isinstance(value, Iterable):
        raise InvalidArgument(field, f"must be a list, tuple or iterator of {of}", type(value).__name__)
    return value


def now_ms() -> int:
    """The current time as the queue counts it (ms since the epoch)."""
    from django.utils import timezone

    return int(timezone.now().timestamp() * 1000)


def epoch_ms(field: str, value: Any) -> int:
    """An aware datetime (naive only when USE_TZ is off) within the queue's time bounds, in ms."""
    if not isinstance(value, datetime):
        raise InvalidArgument(field, "must be a datetime", value)
    if value.tzinfo is None or value.utcoffset() is None:
        from django.conf import settings as django_settings
        from django.utils import timezone

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
    if ms > now_ms() + int(bounds.MAX_AHEAD / timedelta(milliseconds=1)):
        raise InvalidArgument(field, "must be at most 100 years ahead", value)
    return ms


def when(run_at: Any, delay: Any, priority: int) -> tuple[int | None, int | None]:
    """``(run_at_ms, delay_ms)`` of a message; a priority cannot go with a future run time."""
    if run_at is not None and delay is not None:
        raise InvalidArgument("run_at", "cannot be combined with delay", run_at)
    run_at_ms = epoch_ms("run_at", run_at) if run_at is not None else None
    delay_ms = duration_ms("delay", delay) if delay is not None else None
    if priority > 0 and ((delay_ms or 0) > 0 or (run_at_ms is not None and run_at_ms > now_ms())):
        raise PriorityWithSchedule(
            "priority",
            "cannot be combined with a future run time",
            priority,
            message=f"priority {priority} cannot be combined with a future run time: "
            "priority moves a message earlier, a scheduled message has no earlier slot",
        )
    return run_at_ms, delay_ms


def _first_unserializable(value: Any) -> Any:
    """The first object the JSON encoder refuses in ``value`` (the error path only)."""
    found: list[Any] = []

    def record(obj: Any) -> Any:
        found.append(obj)
        raise TypeError

    try:
        json.JSONEncoder(default=record).encode(value)
    except (TypeError, ValueError, RecursionError):
        pass
    return found[0] if found else None


def _serializable_hint(value: Any, error: Exception) -> str:
    """What to pass instead of the object the encoder refused: a sentence, or ""."""
    from datetime import date, time
    from decimal import Decimal
    from uuid import UUID

    obj = _first_unserializable(value)
    if obj is None:
        if "Out of range float" in str(error):
            return "; NaN and infinities are not JSON: pass None or a string instead"
        return ""
    kind = type(obj).__name__
    if isinstance(obj, (datetime, date, time)):
        return f"; pass a {kind} as text, e.g. value.isoformat(), and parse it back in the handler"
    if isinstance(obj, Decimal):
        return "; pass a Decimal as str(value) (exact), and Decimal(text) in the handler"
    if isinstance(obj, UUID):
        return "; pass a UUID as str(value)"
    if hasattr(obj, "_meta") and hasattr(obj, "pk"):
        return f"; pass a {kind} by its key, e.g. obj.pk, and load it again in the handler"
    if isinstance(obj, (set, frozenset)):
        return "; pass a set as a list, e.g. sorted(value)"
    if isinstance(obj, (bytes, bytearray)):
        return "; pass bytes as text, e.g. base64.b64encode(value).decode()"
    return f"; pass a {kind} as JSON values (dict, list, str, int, float, bool, None)"


def _string_keys(value: Any, field: str) -> None:
    """Refuses an object key that is not a string: JSON would turn 1 into "1" silently, and
    the handler would read back another dict than the one enqueued."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                if not isinstance(key, str):
                    raise PayloadError(
                        field,
                        "must have string keys only (JSON would turn the key into a string)",
                        key,
                        message=f"{field} has the key {key!r} ({type(key).__name__}): JSON object keys "
                        f"must be strings, and this one would come back as {json.dumps(str(key))}; "
                        f"use str(key) yourself, or a list of pairs",
                    )
                if isinstance(inner, (dict, list, tuple)):
                    stack.append(inner)
        elif isinstance(item, (list, tuple)):
            stack.extend(inner for inner in item if isinstance(inner, (dict, list, tuple)))
