"""Helpers for your own tests: run the queue to the end, assert what was enqueued.

``drain()`` runs the real worker in-process (``--burst``), so handlers, retries, leases and
dead letters behave as in production. Use it in tests marked
``@pytest.mark.django_db(transaction=True)`` (or ``TransactionTestCase``): the worker's
connections must see the committed messages. In a plain ``TestCase`` use :func:`eager`
(or ``LONNYMQ_EAGER = True``): each message's handler runs in-process as soon as its
enqueue commits, which in a ``TestCase`` is at once (:mod:`django_lonnymq.eager`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime
from typing import Any

from django.db import connections, transaction

from . import eager as _eager
from .conf import settings
from .models import Message
from .registry import autodiscover
from .routing import by_database, databases_of, queue_database
from .worker import Stats, Worker


def drain(
    *queues: str, concurrency: int = 1, batch_size: int | None = None, using: str | None = None
) -> Stats:
    """Process every ready message of ``queues`` (all queues with messages when omitted).

    Warns when called inside a transaction (a ``TestCase``): the worker's own connection
    cannot see messages enqueued there; use :func:`eager` in such tests.
    """
    autodiscover()
    if queues:
        groups = by_database(queues, using)
    else:
        groups = {
            alias: sorted(set(Message.objects.using(alias).values_list("channel__queue", flat=True)))
            for alias in databases_of(using)
        }
    total = Stats()
    for alias, names in groups.items():  # queues on several databases: one after another
        if connections[alias].in_atomic_block:
            warnings.warn(
                "drain() runs inside a transaction (a TestCase?): the worker's own connection cannot "
                "see the messages enqueued in it, so it will not run them. Use "
                "django_lonnymq.testing.eager() (or LONNYMQ_EAGER = True), or a test with "
                "transaction=True.",
                RuntimeWarning,
                stacklevel=2,
            )
        if not names:
            continue
        worker = Worker(
            list(names),
            concurrency=concurrency,
            batch_size=batch_size,
            burst=True,
            using=alias,
            shutdown_timeout=5,
            housekeeping=False,
        )
        stats = worker.run()
        if len(groups) == 1:
            return stats
        for field in fields(Stats):
            if field.name != "started_at":
                setattr(total, field.name, getattr(total, field.name) + getattr(stats, field.name))
    return total


@contextmanager
def eager() -> Iterator[None]:
    """Run each message's handler in-process when its enqueue commits (at once in a
    ``TestCase``), with retries and dead letters applied as by a worker."""
    with _eager.forced():
        yield


@contextmanager
def eager_sleeps() -> Iterator[None]:
    """In eager mode a durable ``message.sleep`` goes on at once; inside this block it
    suspends the message as a worker would, until :func:`resume` (or ``api.resume``)."""
    from .durable import real_sleeps

    with real_sleeps():
        yield


def resume(*ids: int, using: str | None = None) -> list[int]:
    """Resume suspended messages now (a sleep ends, a wait times out); in eager mode they
    run at once. ``api.emit_event`` resumes a wait with its event. Returns the ids resumed."""
    from .api import resume as _resume

    return _resume(ids, using=using)


def enqueued(queue: str, *, channel: str | None = None, using: str | None = None) -> list[Message]:
    """Messages waiting or in flight in ``queue`` (optionally one channel), oldest first."""
    rows = (
        Message.objects.using(queue_database(queue, using))
        .select_related("channel")
        .filter(channel__queue=queue)
    )
    if channel is not None:
        rows = rows.filter(channel__name=channel)
    return list(rows.order_by("id"))


def assert_enqueued(
    queue: str,
    *,
    channel: str | None = None,
    payload: Any = None,
    count: int | None = None,
    using: str | None = None,
) -> list[Message]:
    """Assert that ``queue`` holds matching messages; returns them.

    ``payload`` matches messages whose payload contains these keys with these values (a
    dict) or equals it (anything else). ``count`` asks for exactly that many matches.
    """
    found = enqueued(queue, channel=channel, using=using)
    if payload is not None:
        if isinstance(payload, dict):
            found = [
                m
                for m in found
                if isinstance(m.payload, dict) and all(m.payload.get(k) == v for k, v in payload.items())
            ]
        else:
            found = [m for m in found if m.payload == payload]
    where = f"queue {queue!r}" + (f", channel {channel!r}" if channel else "")
    if count is None and not found:
        raise AssertionError(f"no message matching {payload!r} in {where}")
    if count is not None and len(found) != count:
        raise AssertionError(
            f"expected {count} message(s) matching {payload!r} in {where}, found {len(found)}"
        )
    return found


def assert_nothing_enqueued(queue: str, *, channel: str | None = None, using: str | None = None) -> None:
    """Assert that ``queue`` (or one of its channels) holds no message."""
    found = enqueued(queue, channel=channel, using=using)
    if found:
        raise AssertionError(
            f"expected no message in {queue!r}, found {len(found)}: {[m.id for m in found[:10]]}"
        )


def tick(*queues: str, at: datetime | None = None, using: str | None = None) -> int:
    """Run the periodic schedules of ``queues`` (every queue with a declared schedule when
    omitted) that are due at ``at`` (default: now), as a worker would: the code's ``@periodic``
    declarations are written, then each due tick is enqueued once. Returns how many schedules
    ticked.

    It runs on the caller's connection, so it works in a plain ``TestCase``; under
    :func:`eager` the ticks' handlers run too, as any enqueue's would.
    """
    from django.utils import timezone

    from . import arguments, schedules

    autodiscover()
    alias = str(using or settings.DATABASE)
    names = list(queues) or sorted({d.queue for d in schedules.declarations()})
    now_ms = arguments.epoch_ms("at", at if at is not None else timezone.now())
    wrapper = connections[alias]
    wrapper.ensure_connection()
    raw = wrapper.connection
    # The schedule statements are prepared on the connection: bind on the server while they run.
    factory = raw.cursor_factory
    raw.cursor_factory = _server_cursor(factory)
    # Django's atomic first: inside a test's transaction it sets a savepoint, which begins the
    # transaction on the server, so the statements' own ``transaction()`` blocks nest in it and
    # the test's rollback undoes them (the test's atomic alone sends nothing, and psycopg would
    # then commit its block for real).
    try:
        with transaction.atomic(using=alias):
            schedules.sync(raw, queues=names)
            fired = schedules.tick(raw, names, now_ms=now_ms)
    finally:
        raw.cursor_factory = factory
    if _eager.enabled():
        for queue in names:
            ids = list(
                Message.objects.using(alias)
                .filter(channel__queue=queue, dedup_key__startswith="lonnymq.periodic:")
                .values_list("id", flat=True)
            )
            _eager.after_enqueue(queue, ids, alias)
    return fired


def _server_cursor(factory: Any) -> Any:
    import psycopg

    return psycopg.Cursor if issubclass(factory, psycopg.ClientCursor) else factory
