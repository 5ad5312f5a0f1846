"""Strict order's operations: the ordered channels a dead message blocks, and skipping that
message (docs/limits-and-progress.md, "Strict order per tenant"). Ordering a channel or a plan
is :func:`~django_lonnymq.api.configure_channel` / :func:`~django_lonnymq.api.configure_plan`;
these are re-exported by :mod:`django_lonnymq.api`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from . import arguments, statements
from .routing import queue_database


@dataclass(frozen=True)
class BlockedChannel:
    """An ordered channel that a dead message blocks (:func:`blocked_channels`)."""

    channel: str
    message_id: int
    reason: str | None
    last_error: str | None
    died_at: datetime | None


def blocked_channels(queue: str, *, limit: int = 100, using: str | None = None) -> list[BlockedChannel]:
    """The ordered channels of ``queue`` that a dead message blocks, by name, with that
    message: each waits until :func:`requeue_dead` brings the message back or
    :func:`unblock_channel` skips it."""
    arguments.queue(queue)
    limit = arguments.integer("limit", limit, 1, 10_000)
    found = statements.blocked_channels(queue=queue, limit=limit, on=queue_database(queue, using))
    return [BlockedChannel(b.channel, b.message_id, b.reason, b.last_error, b.died_at) for b in found]


def unblock_channel(queue: str, channel: str, *, using: str | None = None) -> int | None:
    """Skip the dead message that blocks the ordered channel ``queue``/``channel``: the channel
    goes on with the messages after it (the dead one stays in the dead letters). Returns the
    skipped message's id, or None when the channel was not blocked. An unknown channel raises
    :class:`~django_lonnymq.exceptions.InvalidArgument`."""
    arguments.queue(queue)
    arguments.channel(channel)
    skipped = statements.unblock_channel(queue=queue, channel=channel, on=queue_database(queue, using))
    return None if skipped is None else int(skipped)
