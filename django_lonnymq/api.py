"""Enqueue and operate on the queue: each call is one SQL function call on ``connections[using]``.

Enqueue runs on the caller's connection, so inside ``transaction.atomic()`` the message
commits or rolls back with the caller's rows.

A call that names a queue runs on that queue's database (``LONNYMQ_QUEUE_DATABASES``, see
:mod:`.routing`) unless the caller passes ``using=``. Calls that take message or channel ids
(cancel, run_now, requeue_dead, purge...) name no queue, and ids are numbered per database:
they run on ``using`` (default ``LONNYMQ_DATABASE``); pass ``using=queue_database(queue)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError, transaction

from . import arguments, bounds, db, durable, eager, statements, tracing, workflows
from .arguments import now_ms  # noqa: F401 - api.now_ms() is part of the API
from .conf import enqueue_params, settings
from .durations import duration_ms
from .exceptions import InvalidArgument
from .limits import Consumed, consume, rate_limited  # noqa: F401 - api.consume() is part of the API
from .ordering import BlockedChannel, blocked_channels, unblock_channel  # noqa: F401 - part of the API
from .progress import MessageStatus, Progress, message_status  # noqa: F401 - part of the API
from .rates import Rate
from .routing import queue_database, refuse_cross_database

_UNSET: Any = object()


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
    on_duplicate: str | None = None
    cost: int | None = None
    slots: int | None = None


def _max_attempts(field: str, value: int | None) -> int:
    return arguments.integer(field, settings.MAX_ATTEMPTS if value is None else value, 1, bounds.MAX_ATTEMPTS)


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
    on_duplicate: str = "skip",
    max_attempts: int | None = None,
    cost: int = 1,
    slots: int = 1,
    using: str | None = None,
) -> int:
    """Enqueue one message into ``queue``/``channel``; returns its id.

    Runs on the caller's connection and transaction. ``run_at`` (aware datetime) or ``delay``
    schedules it; ``priority`` (0-100) acts as "enqueued priority x LONNYMQ_PRIORITY_STEP
    earlier". A repeated ``dedup_key`` in the same channel is handled by ``on_duplicate``:
    ``"skip"`` returns the key's message id and writes nothing, ``"replace"`` (debounce)
    gives the key's waiting message this payload and run time, ``"update"`` (throttle) this
    payload only; a key whose message runs or has finished gets one new waiting message.
    Returns the id of the message created or changed (docs/flow-control.md). ``cost`` (1 to
    1,000,000) is how many tokens of its channel's and its queue's rate limits its release
    takes (docs/limits-and-progress.md); more than a bucket's burst is an ``InvalidArgument``.
    ``slots`` (1 to 1,000,000) is how many units of its channel's and its queue's
    ``max_concurrency`` it takes while it runs; more than a cap is an ``InvalidArgument``.
    Without ``using`` it runs on the queue's database (``LONNYMQ_QUEUE_DATABASES``, docs/scaling.md).
    """
    arguments.queue(queue)
    using = queue_database(queue, using)
    arguments.channel(channel)
    priority = arguments.integer("priority", priority, 0, bounds.MAX_PRIORITY)
    run_at_ms, delay_ms = arguments.when(run_at, delay, priority)
    if dedup_key is not None:
        arguments.dedup_key(dedup_key)
    arguments.on_duplicate(on_duplicate, dedup_key)
    attempts = _max_attempts("max_attempts", max_attempts)
    cost = arguments.integer("cost", cost, 1, bounds.MAX_COST)
    slots = arguments.integer("slots", slots, 1, bounds.MAX_SLOTS)
    params = {
        "queue": queue,
        "channel": channel,
        "payload": arguments.payload(payload),
        "run_at_ms": run_at_ms,
        "delay_ms": delay_ms,
        "priority": priority,
        "dedup_key": dedup_key,
        "on_duplicate": on_duplicate,
        "max_attempts": attempts,
        "cost": cost,
        "slots": slots,
        **enqueue_params(),
    }
    refuse_cross_database("enqueue", using)
    with tracing.enqueuing(queue, channel) as traced:
        if traced.context is None:
            message_id = int(statements.enqueue(**params, on=using))
        else:
            message_id = int(statements.enqueue_traced(**params, context=traced.context, on=using))
        traced([message_id])
    eager.after_enqueue(queue, [message_id], using)
    return message_id


def enqueue_many(
    queue: str,
    items: Iterable[Item | Any],
    *,
    channel: str = "default",
    run_at: datetime | None = None,
    delay: timedelta | float | None = None,
    priority: int = 0,
    on_duplicate: str = "skip",
    max_attempts: int | None = None,
    cost: int = 1,
    slots: int = 1,
    using: str | None = None,
) -> list[int]:
    """Enqueue many messages of one queue, any channels, in one round trip.

    Each item is an :class:`Item` or a bare payload (which takes the keyword defaults).
    Returns the ids in input order. All or nothing: one bad item fails the whole call.
    ``on_duplicate`` is the mode of the items that set a ``dedup_key`` and no mode of their
    own; items of one key apply in input order, as that many :func:`enqueue` calls would.
    ``cost`` and ``slots`` are those of the items that set none (see :func:`enqueue`). One
    queue, so one database: the queue's (``LONNYMQ_QUEUE_DATABASES``) unless ``using``.
    """
    arguments.queue(queue)
    arguments.channel(channel)
    arguments.default_on_duplicate(on_duplicate)
    arguments.collection("items", items, "items")
    using = queue_database(queue, using)
    default_attempts = _max_attempts("max_attempts", max_attempts)
    default_cost = arguments.integer("cost", cost, 1, bounds.MAX_COST)
    default_slots = arguments.integer("slots", slots, 1, bounds.MAX_SLOTS)
    costs: list[int] = []
    slot_counts: list[int] = []
    channels: list[str] = []
    payloads: list[str] = []
    run_ats: list[int | None] = []
    delays: list[int | None] = []
    priorities: list[int] = []
    dedup_keys: list[str | None] = []
    modes: list[str] = []
    attempts: list[int] = []
    for index, raw in enumerate(items):
        item = raw if isinstance(raw, Item) else Item(payload=raw)
        where = f"items[{index}]"
        item_channel = arguments.channel(
            item.channel if item.channel is not None else channel, f"{where}.channel"
        )
        item_priority = arguments.integer(
            f"{where}.priority", priority if item.priority is None else item.priority, 0, bounds.MAX_PRIORITY
        )
        item_run_at = item.run_at if item.run_at is not None or item.delay is not None else run_at
        item_delay = item.delay if item.run_at is not None or item.delay is not None else delay
        run_at_ms, delay_ms = arguments.when(item_run_at, item_delay, item_priority)
        text, dedup, mode = arguments.batch_item(
            where, item.payload, item.dedup_key, item.on_duplicate, on_duplicate
        )
        channels.append(item_channel)
        payloads.append(text)
        run_ats.append(run_at_ms)
        delays.append(delay_ms)
        priorities.append(item_priority)
        dedup_keys.append(dedup)
        modes.append(mode)
        attempts.append(
            default_attempts
            if item.max_attempts is None
            else _max_attempts(f"{where}.max_attempts", item.max_attempts)
        )
        costs.append(
            default_cost
            if item.cost is None
            else arguments.integer(f"{where}.cost", item.cost, 1, bounds.MAX_COST)
        )
        slot_counts.append(
            default_slots
            if item.slots is None
            else arguments.integer(f"{where}.slots", item.slots, 1, bounds.MAX_SLOTS)
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
        "on_duplicate": modes if any(m != "skip" for m in modes) else None,
        "max_attempts": attempts,
        "default_max_attempts": default_attempts,
        "costs": costs if any(c != 1 for c in costs) else None,
        "slots": slot_counts if any(n != 1 for n in slot_counts) else None,
        **enqueue_params(),
    }
    refuse_cross_database("enqueue_many", using)
    with tracing.enqueuing(queue, None) as traced:
        if traced.context is None:
            ids = [int(i) for i in statements.enqueue_many(**params, on=using)]
        else:
            traced_params = {**params, "context": traced.context}
            ids = [int(i) for i in statements.enqueue_many_traced(**traced_params, on=using)]
        traced(ids)
    eager.after_enqueue(queue, ids, using)
    return ids


# ---------------------------------------------------------------------------------------
# Operations (the admin, the management commands and users' scripts use these)
# ---------------------------------------------------------------------------------------


def configure_channel(
    queue: str,
    channel: str,
    *,
    max_concurrency: int | None = _UNSET,
    release_interval: timedelta | float | None = _UNSET,
    paused: bool | None = _UNSET,
    weight: int = _UNSET,
    rate: Rate | str | None = _UNSET,
    plan: str | None = _UNSET,
    inherit: Iterable[str] | bool = (),
    ordered: bool = _UNSET,
    using: str | None = None,
) -> int:
    """Create or change a channel's limits; omitted ones keep their value. Returns its id.

    ``max_concurrency=None`` means unlimited; ``release_interval`` is the least time between
    two releases; ``weight`` (1 to 1000) is how many messages the channel releases per round
    under backlog; ``rate`` is a token bucket, a :class:`~django_lonnymq.rates.Rate` or its
    text (``"100 / min, burst 20"``), ``None`` for none. Takes effect on the next dequeue.
    Only the limits given are written, under the channel's row lock, so a concurrent change
    of another limit is never overwritten.

    Plans: ``plan="premium"`` makes the channel follow that plan (``None``: no plan; an
    unknown name raises :class:`~django_lonnymq.exceptions.UnknownPlan`). A limit given here
    becomes the channel's own and overrides its plan's; ``inherit`` names limits
    (``"weight"``, ``"max_concurrency"``, ``"release_interval"``, ``"rate"``, ``"ordered"``;
    ``True``: all five) that follow the plan, or the defaults without one, again.

    ``ordered=True``: strict order (docs/limits-and-progress.md). The channel runs one message
    at a time (its ``max_concurrency`` becomes 1, its own, and may not change while ordered)
    in release order; a message waiting for its retry or snoozed holds the channel, a dead one
    blocks it until :func:`requeue_dead` brings it back or :func:`unblock_channel` skips it.
    ``ordered=False`` lifts any hold or block at once (the cap stays 1 until you change it).
    Either is the channel's own: a plan's ``ordered`` (:func:`configure_plan`) no longer
    changes it until ``inherit=["ordered"]``.
    """
    arguments.queue(queue)
    arguments.channel(channel)
    if ordered is not _UNSET and not isinstance(ordered, bool):
        raise InvalidArgument("ordered", "must be a boolean", ordered)
    if not isinstance(inherit, bool) and inherit is not None and not isinstance(inherit, str):
        inherit = list(inherit) if isinstance(inherit, Iterable) else inherit
    if ordered is not _UNSET and (inherit is True or (isinstance(inherit, list) and "ordered" in inherit)):
        raise InvalidArgument("inherit", "cannot name a limit the call also sets", "ordered")
    if ordered is True:
        if max_concurrency is not _UNSET and max_concurrency != 1:
            raise InvalidArgument("max_concurrency", "must be 1 for an ordered channel", max_concurrency)
        if inherit is True or (not isinstance(inherit, bool) and "max_concurrency" in list(inherit or ())):
            raise InvalidArgument("inherit", "cannot include max_concurrency for an ordered channel", inherit)
        max_concurrency = 1
    plan_name = None if plan is _UNSET or plan is None else arguments.name("plan", plan, bounds.MAX_PLAN_NAME)
    inherited = _inherit(inherit)
    limits = _limit_params(weight, max_concurrency, release_interval, rate)
    if paused is _UNSET:
        paused = None
    elif not isinstance(paused, bool):
        raise InvalidArgument("paused", "must be a boolean", paused)
    params = {
        "queue": queue,
        "channel": channel,
        **limits,
        "paused": paused,
        "plan": plan_name,
        "no_plan": plan is None,
        "inherit": inherited,
    }
    alias = queue_database(queue, using)
    try:
        with transaction.atomic(using=alias):
            if ordered is False:
                # Unordered first (the channel made if need be), so the call's cap or plan may
                # be one an ordered channel could not take.
                bare = dict.fromkeys(params, None) | {"queue": queue, "channel": channel, "inherit": []}
                bare |= {"unlimited": False, "no_rate": False, "no_plan": False}
                statements.configure_channel(**bare, on=alias)
                statements.order_channel(queue=queue, channel=channel, ordered=False, on=alias)
            channel_id = int(statements.configure_channel(**params, on=alias))
            if ordered is True:
                statements.order_channel(queue=queue, channel=channel, ordered=True, on=alias)
    except IntegrityError as exc:
        if "lonnymq_channel_ordered_one_at_a_time" not in str(exc):
            raise
        raise InvalidArgument(
            "max_concurrency",
            "must stay 1 while the channel is ordered (configure_channel(ordered=False) first)",
            max_concurrency if max_concurrency is not _UNSET else "the plan's cap",
        ) from exc
    return channel_id


# What a channel takes from its plan unless it sets it itself (configure_channel's inherit).
PLAN_LIMITS = ("weight", "max_concurrency", "release_interval", "rate", "ordered")


def _limit_params(weight: Any, max_concurrency: Any, release_interval: Any, rate: Any) -> dict[str, Any]:
    """The four limits a channel and a plan share, checked, as statement parameters: an
    omitted limit (``_UNSET``) is NULL and keeps its value; ``None`` clears it (``unlimited``,
    ``no_rate``, a release interval of 0)."""
    interval_ms = (
        None
        if release_interval is _UNSET
        else 0
        if release_interval is None
        else duration_ms("release_interval", release_interval, bounds.MAX_INTERVAL)
    )
    bucket = None if rate is _UNSET or rate is None else Rate.of(rate)
    return {
        "weight": None if weight is _UNSET else arguments.integer("weight", weight, 1, bounds.MAX_WEIGHT),
        "max_concurrency": (
            None
            if max_concurrency is _UNSET or max_concurrency is None
            else arguments.integer("max_concurrency", max_concurrency, 1, bounds.MAX_INT4)
        ),
        "unlimited": max_concurrency is None,
        "release_interval_ms": interval_ms,
        "rate_count": bucket.count if bucket else None,
        "rate_period_ms": bucket.period_ms if bucket else None,
        "rate_burst": bucket.burst if bucket else None,
        "no_rate": rate is None,
    }


def _inherit(value: Any) -> list[str]:
    if value is True:
        return list(PLAN_LIMITS)
    if value is False or value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidArgument("inherit", f"must be True or a list of {', '.join(PLAN_LIMITS)}", value)
    names = list(value)
    for limit in names:
        if limit not in PLAN_LIMITS:
            raise InvalidArgument("inherit", f"must name {', '.join(PLAN_LIMITS)}", limit)
    return sorted(set(names))


def configure_plan(
    name: str,
    *,
    weight: int = _UNSET,
    max_concurrency: int | None = _UNSET,
    release_interval: timedelta | float | None = _UNSET,
    rate: Rate | str | None = _UNSET,
    ordered: bool = _UNSET,
    using: str | None = None,
) -> int:
    """Create or change a plan, a named set of limits; omitted ones keep their value (a new
    plan starts from the defaults: weight 1, no cap, no release interval, no rate, not
    ordered).

    The limits mean what they mean on :func:`configure_channel`. Every channel that follows
    the plan takes the new values of the limits it does not set itself, in one SQL statement,
    before this returns (inside a transaction: when it commits). Returns how many channels
    changed.

    ``ordered=True``: strict order for every channel of the plan that does not set
    ``ordered`` itself, as ``configure_channel(ordered=True)`` gives one channel, and for the
    plan's new channels from their creation. The plan's ``max_concurrency`` becomes 1 and
    stays 1 while it is ordered (another cap raises
    :class:`~django_lonnymq.exceptions.InvalidArgument`, and so does a channel of the plan
    whose own cap is not 1). ``ordered=False`` lifts those channels' holds and blocks at once.
    """
    arguments.name("name", name, bounds.MAX_PLAN_NAME)
    if ordered is not _UNSET and not isinstance(ordered, bool):
        raise InvalidArgument("ordered", "must be a boolean", ordered)
    if ordered is True:
        if max_concurrency is not _UNSET and max_concurrency != 1:
            raise InvalidArgument("max_concurrency", "must be 1 for an ordered plan", max_concurrency)
        max_concurrency = 1
    params = {
        "name": name,
        **_limit_params(weight, max_concurrency, release_interval, rate),
        "ordered": None if ordered is _UNSET else ordered,
    }
    return int(statements.configure_plan(**params, on=using))


def delete_plan(name: str, *, using: str | None = None) -> None:
    """Delete a plan that no channel follows and no queue gives its new channels.

    A plan in use raises :class:`~django_lonnymq.exceptions.PlanInUse` (saying how many
    channels and queues), an unknown one :class:`~django_lonnymq.exceptions.UnknownPlan`;
    either way nothing is deleted. Move the channels first
    (``configure_channel(queue, name, plan=...)``).
    """
    arguments.name("name", name, bounds.MAX_PLAN_NAME)
    statements.delete_plan(name=name, on=using)


def configure_queue(
    queue: str,
    *,
    max_concurrency: int | None = _UNSET,
    rate: Rate | str | None = _UNSET,
    default_plan: str | None = _UNSET,
    using: str | None = None,
) -> bool:
    """Set or change a queue's queue-wide limits; omitted ones keep their value.

    ``max_concurrency`` caps the queue's messages in flight across all its workers and
    channels (``None``: no cap); ``rate`` is a token bucket for the whole queue, a
    :class:`~django_lonnymq.rates.Rate` or its text (``"50 / s, burst 10"``; ``None``: none).
    A queue with neither pays nothing for them. Returns whether the queue has a limit now.

    ``default_plan="free"``: the queue's new channels (made by an enqueue, a publish or
    :func:`configure_channel`) follow that plan; channels that exist keep theirs. ``None``:
    no default plan. An unknown plan raises :class:`~django_lonnymq.exceptions.UnknownPlan`.
    """
    arguments.queue(queue)
    plan_name = (
        None
        if default_plan is _UNSET or default_plan is None
        else arguments.name("default_plan", default_plan, bounds.MAX_PLAN_NAME)
    )
    unlimited = max_concurrency is None
    if max_concurrency is _UNSET or max_concurrency is None:
        max_concurrency = None
    else:
        max_concurrency = arguments.integer("max_concurrency", max_concurrency, 1, bounds.MAX_INT4)
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
    using = queue_database(queue, using)
    if default_plan is _UNSET:
        return bool(statements.configure_queue(**params, on=using))
    return bool(statements.configure_queue_plan(**params, plan=plan_name, on=using))


def pause_queue(queue: str, *, using: str | None = None) -> bool:
    """Pause a whole queue: from its next dequeue, no worker takes a message from it.

    Workers stay up and serve their other queues; messages already running finish;
    enqueues, publishes and schedule ticks still write. A queue is a name: one that holds
    nothing yet may be paused (an invalid name raises
    :class:`~django_lonnymq.exceptions.InvalidArgument`). Returns whether it was running.
    """
    arguments.queue(queue)
    return bool(statements.pause_queue(queue=queue, paused=True, on=queue_database(queue, using)))


def resume_queue(queue: str, *, using: str | None = None) -> bool:
    """Resume a paused queue (idle workers are woken). Returns whether it was paused."""
    arguments.queue(queue)
    return bool(statements.pause_queue(queue=queue, paused=False, on=queue_database(queue, using)))


def requeue_dead(ids: Iterable[int], *, reset_attempts: bool = True, using: str | None = None) -> list[int]:
    """Move dead messages back into their channels, ready now. Returns the ids requeued.

    A dead step of a cancelled workflow stays dead and is left out of the result (run again,
    it would release nothing). In eager mode they run as new messages do (a workflow's dead
    step resumes its workflow)."""
    requeued = list(
        statements.requeue_dead(
            ids=arguments.message_ids(ids), reset_attempts=bool(reset_attempts), **_tolerance(), on=using
        )
    )
    eager.made_due(requeued, db.alias(using))
    return requeued


def cancel(ids: Iterable[int], *, missing_ok: bool = False, using: str | None = None) -> list[int]:
    """Cancel messages. Returns the ids cancelled.

    A waiting (ready or scheduled) message is deleted at once; a waiting workflow step goes
    to the dead letters with reason ``cancelled`` instead, which fails its workflow as a dead
    step does (``requeue_dead`` brings it back). A running one is marked:
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
    params = {"ids": arguments.message_ids(ids), "missing_ok": bool(missing_ok)}
    return [(int(row.id), bool(row.running)) for row in statements.cancel(**params, on=using)]


def run_now(ids: Iterable[int], *, using: str | None = None) -> list[int]:
    """Make scheduled or backed-off messages ready now. Returns the ids moved."""
    return list(statements.run_now(ids=arguments.message_ids(ids), **_tolerance(), on=using))


def emit_event(key: str, payload: Any = None, *, using: str | None = None) -> bool:
    """Emit the event ``key`` for durable handlers that wait for it (``message.wait``).

    Runs in the caller's transaction: the waiting messages resume when it commits, and a
    rollback resumes nothing. The first emit of a key wins: it is kept for
    ``LONNYMQ_EVENT_RETENTION`` (a wait that comes later gets its payload at once), and a
    later emit of the key meanwhile changes nothing and returns False. ``payload``: JSON, at
    most 128 KiB as JSON text. docs/durable.md.
    """
    key = durable.check_key(key)
    text = durable.json_text(payload, "payload")
    params = {"key": key, "payload": text, "tolerance_ms": settings.ms("WAKE_TOLERANCE")}
    woken = statements.emit_event(**params, on=using)
    eager.made_due(list(woken or ()), db.alias(using))
    return woken is not None


async def aemit_event(key: str, payload: Any = None, *, using: str | None = None) -> bool:
    """:func:`emit_event` for async code."""
    return await sync_to_async(emit_event, thread_sensitive=True)(key, payload, using=using)


def resume(ids: Iterable[int], *, using: str | None = None) -> list[int]:
    """Resume suspended messages now: a pending sleep ends, a pending wait times out (its
    ``message.wait`` returns None). Returns the ids made due. In eager mode they run."""
    moved = list(statements.resume(ids=arguments.message_ids(ids), **_tolerance(), on=using))
    eager.made_due(moved, db.alias(using))
    return moved


def forget_steps(message_id: int, name: str, *, using: str | None = None) -> list[str]:
    """ "Run again from step ``name``": forget that checkpoint of the message and every one
    written after it, so the next run of its handler does them again. Returns the names."""
    params = {"id": arguments.message_id("message_id", message_id), "name": durable.check_name(name)}
    return list(statements.forget_steps(**params, on=using) or [])


def suspended_counts(*, using: str | None = None) -> dict[str, int]:
    """Suspended messages (a pending durable sleep or wait) per queue, on one database."""
    return durable.suspended_counts(using=using)


def _tolerance() -> dict[str, int]:
    return {"tolerance_ms": settings.ms("WAKE_TOLERANCE")}


def purge_channel(channel_id: int, *, using: str | None = None) -> int:
    """Delete every message of a channel that is not in flight. Returns how many."""
    return int(statements.purge_channel(channel_id=arguments.message_id("channel_id", channel_id), on=using))


def delete_channel(channel_id: int, *, using: str | None = None) -> str:
    """Delete a channel that holds no message and that no producer or dequeuer holds now.

    Returns ``"deleted"``, ``"missing"``, ``"not_empty"`` or ``"busy"`` (try again). Its dead
    messages stay; requeueing them recreates the channel.
    """
    return str(statements.delete_channel(id=arguments.message_id("channel_id", channel_id), on=using))


def purge_dead(ids: Iterable[int], *, using: str | None = None) -> list[int]:
    """Delete dead messages for good. Returns the ids deleted."""
    return list(statements.purge_dead(ids=arguments.message_ids(ids), on=using))


def reap(*, limit: int = 500, using: str | None = None) -> int:
    """Recover expired leases now (workers do this on their own). Returns how many."""
    params = {
        "limit": arguments.integer("limit", limit, 1, 100_000),
        "dedup_window_ms": settings.ms("DEDUP_WINDOW"),
        "tolerance_ms": settings.ms("WAKE_TOLERANCE"),
    }
    return int(statements.reap(**params, on=using))


@dataclass(frozen=True)
class Problem:
    """A broken scheduler invariant reported by :func:`check` (a queue-wide one has no channel;
    an ``orphaned`` one, messages whose channel row is missing, has only the missing id)."""

    channel_id: int | None
    queue: str | None
    channel: str | None
    problem: str
    detail: str


def check(*, grace: timedelta | float = 1.0, using: str | None = None) -> list[Problem]:
    """The channels (and queue-wide caps) whose scheduler state disagrees with their messages,
    and the workflow steps whose state disagrees with their parents' or their message's (a
    queued step whose message a purge deleted: ``workflow_step_lost``) (empty: healthy)."""
    params = {"grace_ms": duration_ms("grace", grace, bounds.MAX_LEASE)}
    problems = [Problem(*row) for row in statements.check(**params, on=using)]
    # Workflow invariants: no waiting step whose parents all succeeded, no released step
    # with a parent that has not, no queued step without a message (no channel id: these
    # are about steps).
    problems.extend(Problem(None, *row) for row in statements.workflow_check(on=using))
    return problems


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
        items = list(arguments.collection("items", items, "items"))
    return list(await sync_to_async(enqueue_many, thread_sensitive=True)(queue, items, **options))


# ---------------------------------------------------------------------------------------
# Workflows (django_lonnymq.workflows)
# ---------------------------------------------------------------------------------------


def workflow(workflow_id: int, *, using: str | None = None) -> Any:
    """A workflow's state (running, succeeded, failed, cancelled) and each step's state and
    times: a :class:`~django_lonnymq.workflows.WorkflowState`."""
    return workflows.workflow(workflow_id, using=using)


def cancel_workflow(workflow_id: int, *, using: str | None = None) -> int:
    """Cancel a workflow's waiting and queued steps, and its running ones as :func:`cancel`
    does; see :func:`django_lonnymq.workflows.cancel_workflow`."""
    return workflows.cancel_workflow(workflow_id, using=using)
