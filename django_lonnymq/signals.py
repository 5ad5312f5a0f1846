"""Django signals about each message's life, sent in the process that runs its handler.

A worker (``run_queue_worker``, ``testing.drain``) and eager mode send them; the enqueuing
process does not. Every signal's ``sender`` is :class:`~django_lonnymq.message.Message` (the
class), and ``message`` is the message itself:

- :data:`message_started` (``message``): right before its handler runs, in the thread that
  runs it (for an ``async def`` handler, on the worker's event loop: keep receivers quick).
- :data:`message_finished` (``message``, ``outcome``, ``error``): once per run, after the
  database recorded what the run came to (in a worker: on its receivers thread, in order,
  never on the thread that keeps leases and acks; :mod:`.worker.receivers`); ``outcome`` is one of :data:`FINISHED`, ``error``
  the stored error text (None after an ack or a snooze).
- :data:`message_dead` (``message``, ``reason``, ``error``): the message went to the dead
  letters; ``reason`` is the one stored with it (``failed``, ``discarded``, ``timeout``,
  ``cancelled``, ``snoozed too often``). ``message_finished`` with outcome ``dead`` follows.
- :data:`message_progress` (``message``, ``done``, ``total``, ``note``): the handler called
  ``message.progress()``, sent on the handler's own thread at every call (before the report is
  written: a worker writes at most every ``LONNYMQ_PROGRESS_INTERVAL``); keep receivers quick.

A receiver that raises is logged (logger ``django_lonnymq.signals``) and changes nothing:
not the message's outcome, not the worker, not the other receivers; a ``BaseException``
(``SystemExit``, ``KeyboardInterrupt``, ``asyncio.CancelledError``) included. With no receiver connected a signal costs one
list check per event.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from asgiref.sync import async_to_sync
from django.dispatch import Signal

logger = logging.getLogger("django_lonnymq.signals")

# What a run came to (message_finished's ``outcome``). "dead": in the dead letters, whatever
# the reason; "timed_out" and "cancelled": interrupted and due again; "lease_lost": the lease
# expired before the outcome could be recorded, so the message may run again.
FINISHED = ("acked", "retried", "snoozed", "suspended", "dead", "timed_out", "cancelled", "lease_lost")

message_started = Signal()
message_finished = Signal()
message_dead = Signal()
message_progress = Signal()


def send(signal: Signal, sender: Any, **named: Any) -> None:
    """Send ``signal`` to its receivers; log, never raise, what one of them raises, even a
    ``BaseException`` (``SystemExit``, ``asyncio.CancelledError``): the line names the message,
    with the traceback."""
    if not signal.receivers:
        return
    for receiver, raised in send_each(signal, sender, **named):
        message = named.get("message")
        logger.error(
            "receiver %s of %s failed on message %s of %s: %r",
            getattr(receiver, "__qualname__", receiver),
            _name_of(signal),
            getattr(message, "id", "-"),
            getattr(message, "queue", "-"),
            raised,
            exc_info=raised,
        )


def send_each(signal: Signal, sender: Any, **named: Any) -> list[tuple[Any, BaseException]]:
    """Call every receiver of ``signal`` as Django's ``send_robust`` does (the plain ones in
    order, then the ``async def`` ones together), but catch ``BaseException``, not only
    ``Exception``: what a receiver raises never reaches the sender, and the receivers after it
    still run. Returns each receiver that raised, with what it raised."""
    if not signal.receivers:
        return []
    sync_receivers, async_receivers = signal._live_receivers(sender)
    raised: list[tuple[Any, BaseException]] = []
    for receiver in sync_receivers:
        try:
            receiver(signal=signal, sender=sender, **named)
        except BaseException as exc:  # noqa: BLE001 - a receiver never stops its sender
            raised.append((receiver, exc))
    if async_receivers:

        async def call(receiver: Any) -> BaseException | None:
            try:
                await receiver(signal=signal, sender=sender, **named)
            except BaseException as exc:  # noqa: BLE001 - CancelledError and SystemExit too
                return exc
            return None

        async def call_all() -> list[BaseException | None]:
            return list(await asyncio.gather(*(call(receiver) for receiver in async_receivers)))

        for receiver, failure in zip(async_receivers, async_to_sync(call_all)(), strict=True):
            if failure is not None:
                raised.append((receiver, failure))
    return raised


def _name_of(signal: Signal) -> str:
    for name in ("message_started", "message_finished", "message_dead", "message_progress"):
        if globals()[name] is signal:
            return name
    return repr(signal)
