"""Topics with consumer groups: publish once, every subscribed queue gets its own message.

A :class:`~django_lonnymq.models.Subscription` ``(topic, queue)`` makes ``queue`` a consumer
group of ``topic``. :func:`publish` writes one message per subscribed queue in one SQL call
(``lonnymq_publish_v3``), on the caller's connection and transaction, so it commits or rolls
back with the caller's rows. Each group's messages are its own: their deliveries, retries,
dead letters and limits never touch another group's. An event's ``key`` names its channel in
every group, so a key's events keep their order (strictly with ``max_concurrency=1`` on that
channel) and keys are served round robin. Events published to a topic nobody subscribes to
are counted per topic in :class:`~django_lonnymq.models.Unrouted` and otherwise dropped.

Subscriptions are rows: created in the admin, or declared in code with :func:`subscribe` (in
an app's ``handlers.py``, beside the handler of the queue) and written by every worker when it
starts (:func:`sync_subscriptions`); a declaration removed from the code leaves its row, which
the admin deletes.

Several databases (``LONNYMQ_QUEUE_DATABASES``): a topic has no home of its own. A
subscription row lives with its queue, on the queue's database, so each database fans an event
out to the groups it holds. Without ``using=``, a publish runs on every database that has a
subscription to the topic (one call each, on that alias's connection and transaction), and on
``LONNYMQ_DATABASE`` alone (counted unrouted there) when none has. With one database, that is
one call, as always. docs/scaling.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from . import arguments, bounds, eager, routing, statements
from .conf import enqueue_params, settings

# (topic, queue) pairs declared with subscribe(), in declaration order.
_declared: dict[tuple[str, str], None] = {}


@dataclass(frozen=True)
class Event:
    """One event for :func:`publish_many`; unset fields take the call's defaults."""

    payload: Any
    key: str | None = None
    run_at: datetime | None = None
    dedup_key: str | None = None
    on_duplicate: str | None = None
    cost: int | None = None
    slots: int | None = None


def check_topic(topic: Any, field: str = "topic") -> str:
    """A topic name: 1 to 200 characters, not only blanks, no NUL."""
    return arguments.name(field, topic, bounds.MAX_TOPIC_NAME)


def subscribe(topic: str, *, queue: str) -> None:
    """Declare that ``queue`` is a consumer group of ``topic`` (written when a worker starts)."""
    check_topic(topic)
    arguments.queue(queue)
    _declared[(topic, queue)] = None


def declared() -> list[tuple[str, str]]:
    """The (topic, queue) pairs declared in code so far."""
    return list(_declared)


def unsubscribe_declared(topic: str, queue: str) -> None:
    """Forget a declaration (for tests); the row, if written, stays."""
    _declared.pop((topic, queue), None)


def sync_subscriptions(*, using: str | None = None) -> int:
    """Write the declared subscriptions that are missing, each on its queue's database (all on
    ``using`` when given); returns how many were created."""
    pairs = declared()
    created = 0
    for alias, queues in routing.by_database([q for _, q in pairs], using).items():
        mine = [(t, q) for t, q in pairs if q in queues]
        params = {"topics": [t for t, _ in mine], "queues": [q for _, q in mine]}
        created += int(statements.subscribe(**params, on=alias))
    return created


def publish(
    topic: str,
    payload: Any,
    *,
    key: str | None = None,
    run_at: datetime | None = None,
    dedup_key: str | None = None,
    on_duplicate: str = "skip",
    cost: int = 1,
    slots: int = 1,
    using: str | None = None,
) -> list[int]:
    """Publish one event: one message in every queue subscribed to ``topic``.

    Returns the message ids, one per subscribed queue in queue-name order (empty when the
    topic has no subscriber: the event is counted as unrouted). ``key`` names the channel
    in each queue (default: ``"default"``); ``dedup_key`` deduplicates within that channel
    of each queue, as :func:`~django_lonnymq.enqueue` does, ``on_duplicate`` included.
    ``cost`` (1 to 1,000,000) is how many tokens of its channel's and its queue's rate limits
    each message takes, as with :func:`~django_lonnymq.enqueue`; a cost past the burst of one
    group's bucket refuses the event in every group. ``slots`` (1 to 1,000,000) is how many
    units of its channel's and its queue's ``max_concurrency`` each message takes while it runs;
    more than one group's cap refuses the event in every group.
    """
    arguments.on_duplicate(on_duplicate, dedup_key)
    cost = arguments.integer("cost", cost, 1, bounds.MAX_COST)
    slots = arguments.integer("slots", slots, 1, bounds.MAX_SLOTS)
    event = Event(
        payload,
        key=key,
        run_at=run_at,
        dedup_key=dedup_key,
        on_duplicate=on_duplicate,
        cost=cost,
        slots=slots,
    )
    ids = publish_many(topic, [event], using=using)
    return ids[0] if ids else []


def publish_many(
    topic: str,
    events: Iterable[Event | Any],
    *,
    key: str | None = None,
    run_at: datetime | None = None,
    on_duplicate: str = "skip",
    cost: int = 1,
    slots: int = 1,
    using: str | None = None,
) -> list[list[int]]:
    """Publish many events of one topic in one round trip, all or nothing.

    Each event is an :class:`Event` or a bare payload (which takes ``key`` and ``run_at``).
    Returns, per event in input order, its message ids in queue-name order. ``on_duplicate``
    is the mode of the events that set a ``dedup_key`` and no mode of their own, ``cost`` and
    ``slots`` those of the events that set none (see :func:`publish`).
    """
    check_topic(topic)
    arguments.default_on_duplicate(on_duplicate)
    arguments.collection("events", events, "events")
    default_cost = arguments.integer("cost", cost, 1, bounds.MAX_COST)
    default_slots = arguments.integer("slots", slots, 1, bounds.MAX_SLOTS)
    aliases = routing.databases_of(using)
    if key is not None:
        arguments.channel(key, "key")
    keys: list[str | None] = []
    payloads: list[str] = []
    run_ats: list[int | None] = []
    dedup_keys: list[str | None] = []
    modes: list[str] = []
    costs: list[int] = []
    slot_counts: list[int] = []
    for index, raw in enumerate(events):
        event = raw if isinstance(raw, Event) else Event(payload=raw)
        where = f"events[{index}]"
        event_key = event.key if event.key is not None else key
        if event_key is not None:
            arguments.channel(event_key, f"{where}.key")
        when = event.run_at if event.run_at is not None else run_at
        text, dedup, mode = arguments.batch_item(
            where, event.payload, event.dedup_key, event.on_duplicate, on_duplicate
        )
        keys.append(event_key)
        payloads.append(text)
        run_ats.append(arguments.epoch_ms(f"{where}.run_at", when) if when is not None else None)
        dedup_keys.append(dedup)
        modes.append(mode)
        costs.append(
            default_cost
            if event.cost is None
            else arguments.integer(f"{where}.cost", event.cost, 1, bounds.MAX_COST)
        )
        slot_counts.append(
            default_slots
            if event.slots is None
            else arguments.integer(f"{where}.slots", event.slots, 1, bounds.MAX_SLOTS)
        )
    if not payloads:
        return []
    attempts = arguments.integer("max_attempts", settings.MAX_ATTEMPTS, 1, bounds.MAX_ATTEMPTS)
    params = {
        "topic": topic,
        "keys": keys if any(k is not None for k in keys) else None,
        "payloads": payloads,
        "run_at_ms": run_ats if any(r is not None for r in run_ats) else None,
        "dedup_keys": dedup_keys if any(d is not None for d in dedup_keys) else None,
        "on_duplicate": modes if any(m != "skip" for m in modes) else None,
        "default_max_attempts": attempts,
        "costs": costs if any(c != 1 for c in costs) else None,
        "slots": slot_counts if any(n != 1 for n in slot_counts) else None,
        **enqueue_params(),
    }
    if len(aliases) > 1:
        aliases = _subscribed(topic, aliases) or aliases[:1]
    rows = []
    for alias in aliases:
        found = statements.publish(**params, on=alias)
        for queue, ids in found:
            eager.after_enqueue(queue, list(ids), alias)
        rows.extend(found)
    if len(aliases) > 1:
        rows.sort(key=lambda row: row[0])  # queue-name order across databases too
    return [[int(ids[index]) for _, ids in rows] for index in range(len(payloads))]


def _subscribed(topic: str, aliases: list[str]) -> list[str]:
    """The databases among ``aliases`` that hold a subscription to ``topic``."""
    from .models import Subscription

    return [alias for alias in aliases if Subscription.objects.using(alias).filter(topic=topic).exists()]


def sync_declared_subscriptions(command: Any, using: str | None) -> None:
    """``run_queue_worker``'s start: write the declared subscriptions. A database that cannot
    take them now is reported, and the worker starts anyway (it waits for the database)."""
    from django.db import DatabaseError, connections

    from .exceptions import LonnyMQError

    try:
        created = sync_subscriptions(using=using)
    except (DatabaseError, LonnyMQError) as exc:
        command.stderr.write(
            f"could not write the declared subscriptions: {str(exc).strip().splitlines()[0]}"
        )
        return
    finally:
        for alias in routing.databases_of(using):
            connections[alias].close()  # the worker opens its own connections
    if created:
        command.stdout.write(f"created {created} declared subscription(s)")
