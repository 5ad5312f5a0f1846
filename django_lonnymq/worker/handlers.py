"""Running handlers: ``concurrency`` threads for plain handlers, one event loop for
``async def`` ones, each run under the timeout and cancel control of :mod:`.running`.

The control thread :meth:`~Handlers.submit`s leased messages (and a batch handler's batches,
:meth:`~Handlers.submit_batch`); each run ends in an :class:`~.outcomes.Outcome` per message
posted to the :class:`~.completion.Completion`. Handler threads run user code with Django's
own per-thread connections.
"""

from __future__ import annotations

import logging
import queue as queue_mod
import threading
import time
from collections.abc import Callable

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections

from ..message import Message
from . import outcomes
from .completion import Completion
from .held import Held
from .observer import Observers
from .outcomes import Outcome
from .running import Control, EventLoopThread
from .stats import Stats

logger = logging.getLogger("django_lonnymq.worker")

Handle = Callable[[Message], object]
# What a handler thread takes: a message, a batch handler's batch, or None (stop).
Job = Message | list[Message] | None


def close_old_connections_after_interrupt() -> None:
    """Close this thread's connections after an interruption: it may have landed in the
    middle of the driver's own code, leaving a connection in a state nobody should reuse."""
    for conn in connections.all(initialized_only=True):
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - a broken connection is what is being dropped
            pass


class Handlers:
    """The handler threads (and event loop) of one worker."""

    def __init__(
        self,
        handlers: dict[str, Handle],
        async_queues: set[str],
        *,
        concurrency: int,
        control: Control,
        held: Held,
        observers: Observers,
        completion: Completion,
        stats: Stats,
    ):
        self.handlers = handlers
        self.async_queues = async_queues
        self.concurrency = concurrency
        self.control = control
        self.held = held
        self.observers = observers
        self.completion = completion
        self.stats = stats
        # SimpleQueue: put and get in C, a few microseconds less per message than queue.Queue.
        self._jobs: queue_mod.SimpleQueue[Job] = queue_mod.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._event_loop: EventLoopThread | None = None
        self._async_connections_due = 0.0
        # The message(s) each handler thread runs now (by thread name), for a thread that dies.
        self._current: dict[str, list[Message]] = {}

    def start(self) -> None:
        if set(self.handlers) - self.async_queues:
            for index in range(self.concurrency):
                thread = threading.Thread(target=self._thread, name=f"lonnymq-handler-{index}", daemon=True)
                thread.start()
                self._threads.append(thread)
        if self.async_queues:
            self._event_loop = EventLoopThread(self.concurrency, self._consume_async)
            self._event_loop.start()

    def submit(self, message: Message) -> None:
        """Run ``message`` on a free handler thread (or the event loop) once one is free."""
        if self._event_loop is not None and message.queue in self.async_queues:
            self._event_loop.submit(message)
        else:
            self._jobs.put(message)

    def submit_batch(self, batch: list[Message]) -> None:
        """Run a batch handler's batch (messages of one queue and channel) as one call."""
        if self._event_loop is not None and batch[0].queue in self.async_queues:
            self._event_loop.submit(batch)
        else:
            self._jobs.put(batch)

    def stop(self, threads: int | None = None) -> None:
        """Ask ``threads`` handler threads (None: all, and the event loop) to return once
        they finish what they run."""
        for _ in range(len(self._threads) if threads is None else threads):
            self._jobs.put(None)
        if threads is None and self._event_loop is not None:
            self._event_loop.stop()

    def dead(self) -> list[str]:
        """Handler threads (or the event loop) that died anyway (nothing should kill one);
        what a dead thread was running fails now, not after its lease."""
        dead = [t.name for t in self._threads if not t.is_alive()]
        if self._event_loop is not None and not self._event_loop.is_alive():
            dead.append(self._event_loop.thread.name)
        for name in dead:
            for message in self._current.pop(name, ()):
                self.completion.post(Outcome(message, "fail", error="the worker's handler thread died"))
        return dead

    def on_abandon(self, message: Message) -> None:
        """Call the handler's ``on_abandon(message)``, if it has one."""
        on_abandon = getattr(self.handlers.get(message.queue), "on_abandon", None)
        if on_abandon is None:
            return
        try:
            on_abandon(message)
        except Exception as exc:
            logger.error("on_abandon of message %s failed: %s", message.id, outcomes.short_repr(exc))

    # -- handler threads ---------------------------------------------------------------

    def _thread(self) -> None:
        last_finished = 0.0
        me = threading.current_thread().name
        while True:
            message = self._jobs.get()
            if message is None:
                return
            if isinstance(message, list):
                self._thread_batch(me, message)
                last_finished = time.monotonic()
                continue
            if not self.held.start(message):  # released before it started
                continue
            self._current[me] = [message]
            began = time.monotonic()
            self.observers.handler_started(message)
            try:
                # Each run ends by dropping broken or expired connections; one more look
                # before the run is only needed after the thread sat idle (CONN_MAX_AGE).
                outcome = self._run_controlled(message, idle=began - last_finished > 1.0)
            except BaseException as exc:  # a bug of ours around the handler, not the handler's
                self.stats.handler_crashes += 1
                logger.critical("handler thread crashed on message %s: %s", message.id, type(exc).__name__)
                outcome = Outcome(
                    message, "fail", error=f"worker error around the handler: {type(exc).__name__}"
                )
            last_finished = time.monotonic()
            self.observers.handler_finished(message, last_finished - began, outcome)
            self._current.pop(me, None)
            self.completion.post(outcome)

    def _thread_batch(self, me: str, batch: list[Message]) -> None:
        """Run a batch handler's batch on this thread: one call, an outcome per message."""
        batch = self._startable(self.held.start_batch(batch))
        if not batch:
            return
        self._current[me] = batch
        began = time.monotonic()
        for message in batch:
            self.observers.handler_started(message)
        try:
            found = self._run_batch_controlled(batch)
        except BaseException as exc:  # a bug of ours around the handler, not the handler's
            found = self._crashed(batch, exc, "handler thread crashed on")
        self._finished(batch, found, time.monotonic() - began)
        self._current.pop(me, None)

    def _startable(self, batch: list[Message]) -> list[Message]:
        """A batch less its messages cancelled before it started (each recorded cancelled)."""
        kept = []
        for message in batch:
            if message.cancel_requested:
                self.completion.post(
                    Outcome(message, "cancelled", error="cancelled before its handler started")
                )
            else:
                message._batched = True
                kept.append(message)
        return kept

    def _crashed(self, batch: list[Message], exc: BaseException, where: str) -> list[Outcome]:
        """A bug of ours around a batch's call: every message of it fails, none is lost."""
        self.stats.handler_crashes += 1
        logger.critical("%s a batch of %d message(s): %s", where, len(batch), type(exc).__name__)
        error = f"worker error around the handler: {type(exc).__name__}"
        return [Outcome(m, "fail", error=error) for m in batch]

    def _finished(self, batch: list[Message], found: list[Outcome], took: float) -> None:
        for outcome in found:
            self.observers.handler_finished(outcome.message, took, outcome)
            self.completion.post(outcome)

    def _run_batch_controlled(self, batch: list[Message]) -> list[Outcome]:
        """Run a batch's handler on this thread under the timeout and cancel control."""
        handle = self.handlers[batch[0].queue]

        def call() -> list[Outcome]:
            close_old_connections()
            try:
                return outcomes.run_batch(handle, batch)  # type: ignore[arg-type]
            finally:
                close_old_connections()

        found, interrupted = self.control.run(batch[0], call, batch=batch)
        if interrupted is not None:
            close_old_connections_after_interrupt()
        timeout = self.control.timeouts.get(batch[0].queue)
        by_id = {o.message.id: o for o in found or ()}
        return [outcomes.after_interrupt(m, by_id.get(m.id), interrupted, timeout) for m in batch]

    def _run_controlled(self, message: Message, idle: bool = True) -> Outcome:
        """Run a message's handler on this thread under the timeout and cancel control."""
        if message.cancel_requested:
            return Outcome(message, "cancelled", error="cancelled before its handler started")
        outcome, interrupted = self.control.run(message, lambda: self._run(message, idle))
        if interrupted is not None:
            close_old_connections_after_interrupt()
        return outcomes.after_interrupt(
            message, outcome, interrupted, self.control.timeouts.get(message.queue)
        )

    def _run(self, message: Message, idle: bool) -> Outcome:
        if idle:
            close_old_connections()
        try:
            return outcomes.run(self.handlers[message.queue], message)
        finally:
            close_old_connections()

    # -- the event loop ----------------------------------------------------------------

    async def _consume_async(self, message: Message | list[Message]) -> None:
        """Run one message's ``async def`` handler on the event loop (one consumer task)."""
        if isinstance(message, list):
            await self._consume_async_batch(message)
            return
        if not self.held.start(message):  # released before it started
            return
        began = time.monotonic()
        self.observers.handler_started(message)
        try:
            if message.cancel_requested:
                outcome = Outcome(message, "cancelled", error="cancelled before its handler started")
            else:
                result, interrupted, exc = await self.control.arun(
                    message,
                    lambda: self.handlers[message.queue](message),  # type: ignore[arg-type, return-value]
                )
                if exc is not None:
                    found = outcomes.outcome_of(message, exc)
                else:
                    found = outcomes.not_run(message, result) or outcomes.acked(message, result)
                timeout = self.control.timeouts.get(message.queue)
                outcome = outcomes.after_interrupt(message, found, interrupted, timeout)
        except BaseException as exc:  # a bug of ours around the handler, not the handler's
            self.stats.handler_crashes += 1
            logger.critical("event loop crashed around message %s: %s", message.id, type(exc).__name__)
            outcome = Outcome(message, "fail", error=f"worker error around the handler: {type(exc).__name__}")
        self.observers.handler_finished(message, time.monotonic() - began, outcome)
        self.completion.post(outcome)
        await self._close_async_connections()

    async def _consume_async_batch(self, batch: list[Message]) -> None:
        """Run an ``async def`` batch handler's batch on the event loop: one call."""
        batch = self._startable(self.held.start_batch(batch))
        if not batch:
            return
        began = time.monotonic()
        for message in batch:
            self.observers.handler_started(message)
        first = batch[0]
        try:
            result, interrupted, exc = await self.control.arun(
                first,
                lambda: self.handlers[first.queue](list(batch)),  # type: ignore[arg-type, return-value]
                batch=batch,
            )
            timeout = self.control.timeouts.get(first.queue)
            found = [outcomes.after_interrupt(o.message, o, interrupted, timeout)
                     for o in outcomes.batch_outcomes(batch, result, exc)]  # fmt: skip
        except BaseException as exc:  # a bug of ours around the handler, not the handler's
            found = self._crashed(batch, exc, "event loop crashed around")
        self._finished(batch, found, time.monotonic() - began)
        await self._close_async_connections()

    async def _close_async_connections(self) -> None:
        if time.monotonic() >= self._async_connections_due:
            # Django's async ORM runs its queries on one thread of its own: drop that thread's
            # connections that broke or outlived CONN_MAX_AGE, as handler threads do per
            # message (here at most once a second: each check is a hop to that thread).
            self._async_connections_due = time.monotonic() + 1.0
            await sync_to_async(close_old_connections, thread_sensitive=True)()
