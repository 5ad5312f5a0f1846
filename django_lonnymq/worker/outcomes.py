"""What a handler's run comes to, shared by the worker and eager mode.

A dequeued row becomes a :class:`~django_lonnymq.message.Message` (:func:`message_from_row`);
running its handler gives an :class:`Outcome` (:func:`run`): an ack, a retry (with the delay
the handler asked for), a snooze, a discard, a failure, a timeout or a cancel;
:func:`snooze_params` are the parameters of the ``snooze`` statement that records a snooze,
:func:`suspend_params` those of the ``suspend`` statement that records a durable sleep or wait,
:func:`fail_params` those of the ``fail`` statement that records the others.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .. import arguments, bounds
from ..conf import to_ms
from ..exceptions import BatchFailed, Discard, Interrupted, InvalidArgument, Retry, Snooze, Suspended
from ..jsontext import Undecodable, storable
from ..message import Message
from .running import TIMEOUT

logger = logging.getLogger("django_lonnymq.worker")

# The reason lonnymq_fail_v2 records for each outcome that is not an ack.
FAIL_REASONS = {
    "fail": "failed",
    "retry": "failed",
    "discard": "discarded",
    "timeout": "timeout",
    "cancelled": "cancelled",
}


@dataclass
class Outcome:
    """What a handler's run asks for: ack, retry (with optional delay), or discard."""

    message: Message
    # "ack" | "fail" | "retry" | "snooze" | "suspend" | "discard" | "timeout" | "cancelled"
    action: str
    error: str | None = None
    delay_ms: int | None = None
    # Sent once already when the connection dropped: that call may have committed.
    resent: bool = False
    # A workflow step's output: the handler's return value as JSON text (None: null).
    output: str | None = None


def message_from_row(
    queue: str,
    row: tuple[Any, ...],
    extend: Callable[[Message, timedelta | float | None], None] | None = None,
) -> Message:
    """The message of a row of the ``dequeue`` statement; ``extend`` backs its ``extend_lease``."""
    (
        msg_id,
        channel,
        payload,
        attempts,
        max_attempts,
        priority,
        dedup_key,
        enqueued_at,
        token,
        lease_until,
    ) = row[:10]  # a workflow step's name and inputs follow (worker/fetching.py)
    return Message(
        id=msg_id,
        queue=queue,
        channel=channel,
        payload=payload,
        attempt=attempts,
        max_attempts=max_attempts,
        enqueued_at=enqueued_at,
        priority=priority,
        dedup_key=dedup_key,
        lease_token=token,
        lease_until_ms=lease_until,
        _extend=extend,
    )


def refused(message: Message) -> Outcome | None:
    """The outcome of a message no handler can be given (its payload cannot be decoded, a
    step's inputs are past their bound): dead-lettered at once, alone; None for every other
    message."""
    if message._inputs_too_large is not None:
        error = inputs_too_large(message._inputs_too_large)
        logger.error(
            "message %s of %s: %s; dead-lettered without running its handler",
            message.id,
            message.queue,
            error,
        )
        return Outcome(message, "discard", error=error)
    if isinstance(message.payload, Undecodable):
        logger.error(
            "message %s of %s: payload cannot be decoded (%s); dead-lettered without running its handler",
            message.id,
            message.queue,
            message.payload.error,
        )
        return Outcome(message, "discard", error=f"payload cannot be decoded: {message.payload.error}")
    return None


def inputs_too_large(size: int) -> str:
    """Why a step cannot be given its inputs (the text lonnymq_inputs_too_large_v1 stores)."""
    return (
        f"inputs_too_large: the outputs of its parents take {size} bytes as stored, more than "
        f"the {bounds.MAX_STEP_INPUTS} (64 MiB) a step's inputs may take"
    )


def run(handle: Callable[[Message], object], message: Message) -> Outcome:
    """Call ``handle(message)``; the outcome it asks for. Whatever it raises (even
    ``SystemExit``) becomes an outcome: a failing handler never stops its caller."""
    try:
        result = handle(message)
        if isinstance(result, Awaitable):
            getattr(result, "close", lambda: None)()
            return Outcome(message, "fail", error="the handler returned an awaitable: declare it async def")
        return not_run(message, result) or acked(message, result)
    except BaseException as exc:
        return outcome_of(message, exc)


def run_batch(handle: Callable[[list[Message]], object], batch: list[Message]) -> list[Outcome]:
    """Call a batch handler with ``batch`` (messages of one channel); each message's outcome.
    As with :func:`run`, whatever it raises becomes outcomes."""
    try:
        result = handle(list(batch))
        if isinstance(result, Awaitable):
            getattr(result, "close", lambda: None)()
            return [Outcome(m, "fail", error="the handler returned an awaitable: declare it async def")
                    for m in batch]  # fmt: skip
        return batch_outcomes(batch, result, None)
    except BaseException as exc:
        return batch_outcomes(batch, None, exc)


def batch_outcomes(batch: list[Message], result: object, exc: BaseException | None) -> list[Outcome]:
    """What a batch handler's return (``exc`` None) or exception comes to, message by message:
    a return acks them all; :class:`~django_lonnymq.exceptions.BatchFailed` fails the messages
    it names (each as its exception asks) and acks the others; any other exception applies to
    every message, as if each had raised it."""
    first = batch[0]
    if exc is None:
        wrong = not_run(first, result)
        if wrong is not None:
            return [Outcome(m, "fail", error=wrong.error) for m in batch]
        return [acked(m, None) for m in batch]
    if isinstance(exc, BatchFailed):
        unknown = sorted(set(exc.failures) - {m.id for m in batch})
        if unknown:
            error = f"BatchFailed names message(s) {unknown} that are not in the batch; the whole batch fails"
            logger.warning("batch of %d message(s) of %s (channel %s): %s", len(batch), first.queue,
                           first.channel, error)  # fmt: skip
            return [Outcome(m, "fail", error=error) for m in batch]
        logger.warning(
            "batch of %d message(s) of %s (channel %s): %d failed (%s)",
            len(batch),
            first.queue,
            first.channel,
            len(exc.failures),
            ", ".join(str(i) for i in sorted(exc.failures)[:10]),
        )
        found: list[Outcome] = []
        for message in batch:
            failure = exc.failures.get(message.id)
            if failure is None:
                found.append(acked(message, None))
            elif isinstance(failure, str):
                found.append(Outcome(message, "fail", error=failure))
            else:
                found.append(outcome_of(message, failure, quiet=True))
        return found
    if not isinstance(exc, (Interrupted, asyncio.CancelledError, Retry, Snooze, Discard)):
        logger.warning(
            "batch of %d message(s) of %s (channel %s) failed: %s",
            len(batch),
            first.queue,
            first.channel,
            short_repr(exc),
        )
    return [outcome_of(m, exc, quiet=True) for m in batch]


def not_run(message: Message, result: object) -> Outcome | None:
    """A handler whose call returned a generator (or an async generator) ran none of its body:
    the message fails, never acked unrun (a generator function behind a decorator that hid
    it from the check at registration). None for any other result."""
    if isinstance(result, Generator):
        result.close()
        kind = "a generator"
    elif isinstance(result, AsyncGenerator):
        kind = "an async generator"
    else:
        return None
    return Outcome(
        message,
        "fail",
        error=f"the handler returned {kind} and ran none of its body (it yields): "
        "a handler must be a function or an async def function that returns",
    )


def acked(message: Message, result: object) -> Outcome:
    """A handler returned ``result``: an ack; a workflow step's output is the result as
    JSON, and an output that is not JSON or is over LONNYMQ_MAX_PAYLOAD_BYTES fails the run."""
    if message._suspended_on is not None:
        # A durable sleep or wait suspended the run, and the handler caught Suspended: the
        # run still ends suspended (an ack would lose the rest of the handler).
        return Outcome(message, "suspend")
    if message.step_name is None or result is None:
        return Outcome(message, "ack")
    try:
        output = arguments.payload(result, "output")
    except InvalidArgument as exc:
        return Outcome(message, "fail", error=f"the step's output was refused: {exc}")
    return Outcome(message, "ack", output=output)


def outcome_of(message: Message, exc: BaseException, quiet: bool = False) -> Outcome:
    """What a handler's exception asks for: a retry, a discard, or a failure (``quiet``: a
    batch's, logged once for the batch)."""
    if isinstance(exc, Retry):
        try:
            delay_ms = to_ms(exc.delay)
        except Exception as bad:  # a Retry built around the check in Retry.__init__
            return Outcome(message, "fail", error=f"invalid Retry delay {exc.delay!r}: {bad!r}")
        return Outcome(message, "retry", error=exc.reason or "retry requested", delay_ms=delay_ms)
    if isinstance(exc, Snooze):
        try:
            delay_ms = to_ms(exc.delay)
        except Exception as bad:  # a Snooze built around the check in Snooze.__init__
            return Outcome(message, "fail", error=f"invalid Snooze delay {exc.delay!r}: {bad!r}")
        return Outcome(message, "snooze", delay_ms=delay_ms)
    if isinstance(exc, Discard):
        return Outcome(message, "discard", error=exc.reason)
    if isinstance(exc, Suspended) or (message._suspended_on is not None and isinstance(exc, Exception)):
        return Outcome(message, "suspend")
    if not quiet and not isinstance(exc, (Interrupted, asyncio.CancelledError)):  # logged by after_interrupt
        logger.warning(
            "message %s of %s failed on attempt %d: %s",
            message.id,
            message.queue,
            message.attempt,
            short_repr(exc),
        )
    return Outcome(message, "fail", error=describe_exception(exc))


def after_interrupt(
    message: Message, outcome: Outcome | None, interrupted: str | None, timeout: float | None
) -> Outcome:
    """A run that was interrupted, or whose message was cancelled while it ran, ends as the
    interruption says whatever the handler did afterwards."""
    if interrupted is None and not message.cancel_requested and outcome is not None:
        return outcome
    detail = f"\n{outcome.error}" if outcome is not None and outcome.error else ""
    if interrupted == TIMEOUT and not message.cancel_requested:
        logger.warning(
            "message %s of %s timed out after %gs on attempt %d",
            message.id,
            message.queue,
            timeout or 0,
            message.attempt,
        )
        return Outcome(message, "timeout", error=f"timed out after {timeout:g}s{detail}")
    logger.warning("message %s of %s was cancelled while it ran", message.id, message.queue)
    return Outcome(message, "cancelled", error=f"cancelled while running{detail}")


def fail_params(
    outcome: Outcome, *, backoff_base_ms: int, backoff_max_ms: int, tolerance_ms: int, at_once: bool = False
) -> dict[str, Any]:
    """The ``fail`` statement's parameters for an outcome that is not an ack; ``at_once``
    (eager mode) makes a requested retry due now. The error text is stored as
    :func:`~django_lonnymq.jsontext.storable` makes it (a NUL or a lone surrogate escaped):
    a text PostgreSQL refuses would lose the outcome."""
    retry = outcome.action == "retry"
    return {
        "id": outcome.message.id,
        "token": str(outcome.message.lease_token),
        "error": storable(outcome.error),
        "retry_delay_ms": (0 if at_once else outcome.delay_ms) if retry else None,
        "reason": FAIL_REASONS[outcome.action],
        "backoff_base_ms": backoff_base_ms,
        "backoff_max_ms": backoff_max_ms,
        "tolerance_ms": tolerance_ms,
    }


def snooze_params(
    outcome: Outcome,
    *,
    max_snoozes: int,
    backoff_base_ms: int,
    backoff_max_ms: int,
    tolerance_ms: int,
    at_once: bool = False,
) -> dict[str, Any]:
    """The ``snooze`` statement's parameters for a snooze outcome; ``at_once`` (eager mode)
    makes it due now."""
    return {
        "id": outcome.message.id,
        "token": str(outcome.message.lease_token),
        "delay_ms": 0 if at_once else outcome.delay_ms,
        "max_snoozes": max_snoozes,
        "backoff_base_ms": backoff_base_ms,
        "backoff_max_ms": backoff_max_ms,
        "tolerance_ms": tolerance_ms,
    }


def suspend_params(outcome: Outcome, *, tolerance_ms: int) -> dict[str, Any]:
    """The ``suspend`` statement's parameters: the run stopped at the sleep or wait
    ``message._suspended_on`` (django_lonnymq.durable)."""
    return {
        "id": outcome.message.id,
        "token": str(outcome.message.lease_token),
        "name": outcome.message._suspended_on,
        "tolerance_ms": tolerance_ms,
    }


def snoozed_too_often(max_snoozes: int) -> str:
    """The error a snooze past the bound records (the text lonnymq_snooze_v1 stores)."""
    return f"snoozed more than {max_snoozes} times"


def short_repr(exc: BaseException) -> str:
    """repr() of a handler's exception, or its type when even that raises."""
    try:
        return repr(exc)
    except Exception:
        return f"<{type(exc).__name__} that cannot be shown>"


def describe_exception(exc: BaseException) -> str:
    """The error text stored with a failed message: type, message and a short traceback."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=8))
    return text[-4000:]
