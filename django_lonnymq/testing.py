"""Helpers for your own tests: run the queue to the end, assert what was enqueued.

``drain()`` runs the real worker in-process (``--burst``), so handlers, retries, leases and
dead letters behave as in production. Use it in tests marked
``@pytest.mark.django_db(transaction=True)`` (or ``TransactionTestCase``): the worker's
connections must see the committed messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .conf import settings
from .models import Message
from .registry import autodiscover
from .worker import Stats, Worker


def drain(
    *queues: str, concurrency: int = 1, batch_size: int | None = None, using: str | None = None
) -> Stats:
    """Process every ready message of ``queues`` (all queues with messages when omitted)."""
    autodiscover()
    names: Sequence[str] = queues or sorted(
        set(Message.objects.using(using or settings.DATABASE).values_list("channel__queue", flat=True))
    )
    if not names:
        return Stats()
    worker = Worker(
        list(names),
        concurrency=concurrency,
        batch_size=batch_size,
        burst=True,
        using=using,
        shutdown_timeout=5,
    )
    return worker.run()


def enqueued(queue: str, *, channel: str | None = None, using: str | None = None) -> list[Message]:
    """Messages waiting or in flight in ``queue`` (optionally one channel), oldest first."""
    rows = (
        Message.objects.using(using or settings.DATABASE)
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
