"""Handlers under control: timeouts, cancelling a running message, abandoning a stuck handler,
and the event loop that ``async def`` handlers run on.

The worker's control thread owns a :class:`Control`. Each handler run is registered with it
(:meth:`Control.run` on a handler thread, :meth:`Control.arun` on the event loop),
and the control thread calls :meth:`Control.tick` on every pass of its loop:

- past its timeout, a run is interrupted: :class:`~django_lonnymq.exceptions.HandlerTimeout`
  is raised into its thread (``PyThreadState_SetAsyncExc``, as Dramatiq's time limit does),
  or its asyncio task is cancelled;
- a cancelled message (:meth:`Control.cancel`, learnt from the heartbeat) gets
  ``message.cancel_requested`` at once and is interrupted ``cancel_grace`` later with
  :class:`~django_lonnymq.exceptions.HandlerCancelled`;
- a run still going ``interrupt_grace`` after its interruption is abandoned: ``tick``
  returns it, and the worker stops extending its lease, stops fetching and exits non-zero.

An exception raised into a thread lands between two bytecodes: a handler blocked in a C
call (``time.sleep(60)``, a socket read without a timeout) only sees it when the call
returns, which is what the grace period and abandonment are for. At most one interruption
is raised per run, and never after the run ended: the handler thread marks the run done
under the same lock and clears an interruption raised but not yet delivered.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..exceptions import HandlerCancelled, HandlerTimeout, Interrupted
from ..message import Message

logger = logging.getLogger("django_lonnymq.worker")

T = TypeVar("T")

TIMEOUT = "timeout"
CANCELLED = "cancelled"


def raise_in_thread(thread_id: int, exc_type: type[BaseException] | None) -> bool:
    """Raise ``exc_type`` in the thread ``thread_id`` at its next bytecode (None clears a
    pending one). True when exactly that thread was found."""
    found = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type) if exc_type is not None else None
    )
    if found > 1:  # cannot happen with a valid id; undo rather than hit several threads
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)
        return False
    return found == 1


@dataclass
class Run:
    """One handler run: where it runs and what the control thread did to it."""

    message: Message
    deadline: float | None
    thread_id: int | None = None
    task: asyncio.Task[Any] | None = None
    loop: asyncio.AbstractEventLoop | None = None
    # When to interrupt it for a cancel (monotonic), once the cancel is known.
    cancel_at: float | None = None
    # Set once, when the interruption is raised: TIMEOUT or CANCELLED.
    reason: str | None = None
    interrupted_at: float | None = None
    done: bool = False
    abandoned: bool = False
    # A batch handler's call: every message of its batch (``message`` is the first).
    batch: list[Message] | None = None


class Control:
    """Timeouts, cancels and abandonment of the runs of one worker (see the module docstring)."""

    def __init__(
        self,
        timeouts: dict[str, float | None],
        *,
        cancel_grace: float,
        interrupt_grace: float,
    ):
        self.timeouts = timeouts  # seconds per queue, None: no timeout
        self.cancel_grace = cancel_grace
        self.interrupt_grace = interrupt_grace
        self._lock = threading.Lock()
        self._runs: dict[int, Run] = {}

    # -- handler side ------------------------------------------------------------------

    def _begin(self, message: Message, **where: Any) -> Run:
        timeout = self.timeouts.get(message.queue)
        now = time.monotonic()
        run = Run(message, deadline=now + timeout if timeout else None, **where)
        with self._lock:
            if message.cancel_requested:  # learnt while it waited for a free handler
                run.cancel_at = now + self.cancel_grace
            self._runs[message.id] = run
        return run

    def _end(self, run: Run) -> None:
        """Mark the run done (no interruption can be raised after this) and clear one that
        was raised but has not landed yet. Safe to call twice."""
        with self._lock:
            run.done = True
            if run.reason is not None and run.thread_id is not None:
                raise_in_thread(run.thread_id, None)
            if self._runs.get(run.message.id) is run:
                del self._runs[run.message.id]

    def run(
        self, message: Message, call: Callable[[], T], batch: list[Message] | None = None
    ) -> tuple[T | None, str | None]:
        """Run ``call`` on this (handler) thread under control (``batch``: a batch handler's
        call, ``message`` its first message; abandoned, it gives back all of them).

        Returns its result (None if an interruption cut it short outside the handler) and the
        interruption raised, if any: TIMEOUT, CANCELLED or None.
        """
        run = self._begin(message, thread_id=threading.get_ident(), batch=batch)
        result: T | None = None
        try:
            try:
                result = call()
            finally:
                self._end(run)
        except Interrupted:
            # Landed in our own code after the handler returned, before _end took the lock.
            # Only one is ever raised per run, so none can follow this one.
            self._end(run)
        return result, run.reason

    async def arun(
        self, message: Message, call: Callable[[], Awaitable[T]], batch: list[Message] | None = None
    ) -> tuple[T | None, str | None, BaseException | None]:
        """Run the coroutine ``call()`` on the event loop under control, as a task of its own
        (so cancelling it cancels the handler only). Returns its result, the interruption
        (TIMEOUT, CANCELLED or None) and the exception it raised, if any."""
        loop = asyncio.get_running_loop()
        task: asyncio.Task[T] = loop.create_task(call())  # type: ignore[arg-type]
        run = self._begin(message, task=task, loop=loop, batch=batch)
        try:
            return await task, run.reason, None
        except BaseException as exc:  # noqa: BLE001 - CancelledError included: it is the handler's
            return None, run.reason, exc
        finally:
            self._end(run)

    # -- control side --------------------------------------------------------------------

    def cancel(self, messages: list[Message]) -> None:
        """Someone cancelled these messages: flag them now, interrupt them after the grace."""
        now = time.monotonic()
        with self._lock:
            for message in messages:
                message.cancel_requested = True
                run = self._runs.get(message.id)
                if run is not None and not run.done and run.cancel_at is None:
                    run.cancel_at = now + self.cancel_grace

    def _interrupt(self, run: Run, reason: str, now: float) -> None:
        """Raise the interruption into the run (the lock is held, the run is not done)."""
        run.reason = reason
        run.interrupted_at = now
        if run.thread_id is not None:
            raise_in_thread(run.thread_id, HandlerTimeout if reason == TIMEOUT else HandlerCancelled)
        elif run.task is not None and run.loop is not None:
            message = f"message {run.message.id} {'timed out' if reason == TIMEOUT else 'was cancelled'}"
            try:
                run.loop.call_soon_threadsafe(run.task.cancel, message)
            except RuntimeError:  # the loop is closed: nothing left to cancel
                pass

    def tick(self) -> list[Message]:
        """Interrupt what is due; returns the messages of runs abandoned now."""
        now = time.monotonic()
        abandoned: list[Message] = []
        with self._lock:
            for run in list(self._runs.values()):
                if run.done or run.abandoned:
                    continue
                if run.reason is None:
                    if run.cancel_at is not None and now >= run.cancel_at:
                        self._interrupt(run, CANCELLED, now)
                    elif run.deadline is not None and now >= run.deadline:
                        self._interrupt(run, TIMEOUT, now)
                elif run.interrupted_at is not None and now >= run.interrupted_at + self.interrupt_grace:
                    run.abandoned = True
                    abandoned.extend(run.batch or [run.message])
        return abandoned

    def due_in(self) -> float | None:
        """Seconds until the next interruption or abandonment is due (None: nothing)."""
        now = time.monotonic()
        times: list[float] = []
        with self._lock:
            for run in self._runs.values():
                if run.done or run.abandoned:
                    continue
                if run.reason is None:
                    times.extend(t for t in (run.cancel_at, run.deadline) if t is not None)
                elif run.interrupted_at is not None:
                    times.append(run.interrupted_at + self.interrupt_grace)
        return max(min(times) - now, 0.0) if times else None


class EventLoopThread:
    """One thread running an asyncio event loop, with ``concurrency`` consumer tasks taking
    messages from an asyncio queue: the async twin of the worker's handler threads."""

    def __init__(self, concurrency: int, consume: Callable[[Message | list[Message]], Awaitable[None]]):
        self.concurrency = concurrency
        self._consume = consume
        self.loop = asyncio.new_event_loop()
        self._jobs: asyncio.Queue[Message | list[Message] | None] | None = None
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name="lonnymq-event-loop", daemon=True)

    def start(self) -> None:
        self.thread.start()
        self._ready.wait(10)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._jobs = asyncio.Queue()
        consumers = [asyncio.ensure_future(self._consumer()) for _ in range(self.concurrency)]
        self._ready.set()
        await asyncio.gather(*consumers)

    async def _consumer(self) -> None:
        assert self._jobs is not None
        while True:
            message = await self._jobs.get()
            if message is None:
                return
            await self._consume(message)

    def submit(self, message: Message | list[Message] | None) -> None:
        """Hand a message (or a batch) to a free consumer (None stops one consumer). Thread-safe."""
        assert self._jobs is not None
        self.loop.call_soon_threadsafe(self._jobs.put_nowait, message)

    def stop(self) -> None:
        """Stop the consumers once they finish what they run (not waiting for them)."""
        for _ in range(self.concurrency):
            try:
                self.submit(None)
            except RuntimeError:  # loop already closed
                return

    def is_alive(self) -> bool:
        return self.thread.is_alive()
