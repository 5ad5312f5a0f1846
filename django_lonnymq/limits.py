"""Limits outside jobs: a channel's token bucket spent by other code (a view).

A tenant's API quota is often one budget for its web requests and its jobs. The channel's
token bucket (``configure_channel(rate=...)``) is the budget the workers' dequeue spends one
token per message of; :func:`consume` takes tokens of the same bucket, under the same row
lock and with the same refill formula (``lonnymq_consume_v1``), so the two never spend more
than the bucket allows between them. docs/limits-and-progress.md has the user story.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import arguments, statements
from .routing import queue_database

# The largest bucket a rate may have (rates.py, lonnymq_channel_rate_burst_range).
MAX_TOKENS = 1_000_000


@dataclass(frozen=True)
class Consumed:
    """What :func:`consume` got: ``ok`` whether the tokens were taken; when not,
    ``retry_after`` the seconds until the bucket holds them (0.0 when taken), if no job or
    other caller takes them first."""

    ok: bool
    retry_after: float

    def __bool__(self) -> bool:
        return self.ok


def consume(queue: str, channel: str, tokens: int = 1, *, using: str | None = None) -> Consumed:
    """Take ``tokens`` tokens of the channel's token bucket, all or none.

    Raises :class:`~django_lonnymq.exceptions.InvalidArgument` (nothing written) for an
    invalid queue or channel name, a channel that does not exist or has no rate, and
    ``tokens`` that is not an integer from 1 to the bucket's capacity (its burst). Taken
    tokens delay the channel's jobs as their releases would: the channel's next turn waits
    for its next token. The queue-wide bucket (``configure_queue(rate=...)``) is not spent.
    Runs in the caller's transaction when there is one (the row lock is held until it ends).
    """
    arguments.queue(queue)
    arguments.channel(channel)
    arguments.integer("tokens", tokens, 1, MAX_TOKENS)
    row = statements.consume(queue=queue, channel=channel, tokens=tokens, on=queue_database(queue, using))[0]
    ok, retry_after_ms = row
    return Consumed(bool(ok), retry_after_ms / 1000.0)


def rate_limited(
    queue: str,
    channel: Callable[[Any], str],
    tokens: int | Callable[[Any], int] = 1,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A view decorator: the view runs only when :func:`consume` takes the request's tokens
    from ``channel(request)``'s bucket; otherwise the response is a 429 with a
    ``Retry-After`` header (whole seconds, rounded up)."""

    def decorate(view: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(view)
        def wrapped(request: Any, *args: Any, **kwargs: Any) -> Any:
            from django.http import HttpResponse

            amount = tokens(request) if callable(tokens) else tokens
            got = consume(queue, channel(request), amount)
            if not got.ok:
                response = HttpResponse("Too Many Requests", status=429)
                response["Retry-After"] = str(max(1, math.ceil(got.retry_after)))
                return response
            return view(request, *args, **kwargs)

        return wrapped

    return decorate
