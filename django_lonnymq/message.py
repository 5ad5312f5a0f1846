"""The message a handler receives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from .bounds import MAX_LEASE
from .durations import duration_ms
from .exceptions import InvalidArgument, NotInHandler

# A step's message carries this dedup key prefix and its workflow id: how a worker tells a
# step from a plain message without asking the database.
STEP_KEY_PREFIX = "lonnymq.step:"
# The on_failure message's dedup key: this prefix and the workflow id (enqueued once).
FAILED_KEY_PREFIX = "lonnymq.workflow_failed:"


def workflow_of(dedup_key: str | None) -> int | None:
    """The workflow id a step's (or an on_failure message's) dedup key carries, else None."""
    if not dedup_key:
        return None
    for prefix in (STEP_KEY_PREFIX, FAILED_KEY_PREFIX):
        if dedup_key.startswith(prefix):
            try:
                return int(dedup_key[len(prefix) :])
            except ValueError:
                return None
    return None


def is_step(dedup_key: str | None) -> bool:
    return bool(dedup_key) and dedup_key.startswith(STEP_KEY_PREFIX)  # type: ignore[union-attr]


# The dedup key of a periodic schedule's tick: the schedule's id and the tick (ms since the epoch).
TICK_KEY_PREFIX = "lonnymq.periodic:"


def tick_of(dedup_key: str | None) -> datetime | None:
    """The scheduled time carried by a tick message's dedup key (None for other keys)."""
    if not dedup_key or not dedup_key.startswith(TICK_KEY_PREFIX):
        return None
    try:
        ms = int(dedup_key.rsplit(":", 1)[1])
        return datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (ValueError, OverflowError, OSError):
        return None


@dataclass
class Message:
    """One delivery of a message to a handler.

    ``attempt`` counts deliveries, this one included (1 on the first). ``extend_lease()``
    keeps the message for longer than the worker's lease; the worker also extends leases on
    its own while handlers run. ``cancel_requested`` turns true when the message is
    cancelled while it runs; the worker interrupts the handler ``LONNYMQ_CANCEL_GRACE`` later.
    """

    id: int
    queue: str
    channel: str
    payload: Any
    attempt: int
    max_attempts: int
    enqueued_at: datetime
    priority: int = 0
    dedup_key: str | None = None
    lease_token: UUID | None = None
    lease_until_ms: int = 0
    # Someone cancelled this message while it ran (set by the worker at its heartbeat): a
    # handler that checks it can stop cleanly before the worker interrupts it.
    cancel_requested: bool = False
    # A workflow's step (django_lonnymq.workflows): its workflow, its name and its parents'
    # outputs by step name (the worker fills them in); None and {} for other messages. An
    # on_failure message carries its workflow_id too.
    workflow_id: int | None = None
    step_name: str | None = None
    parent_outputs: dict[str, Any] = field(default_factory=dict)
    _extend: Callable[[Message, timedelta | float | None], None] | None = field(
        default=None, repr=False, compare=False
    )
    # A step whose parents' outputs take more than bounds.MAX_STEP_INPUTS bytes: their size
    # (its inputs were not built; it is dead-lettered without running).
    _inputs_too_large: int | None = field(default=None, repr=False, compare=False)
    # Durable handlers (django_lonnymq.durable.Durable): set by the worker and eager mode; the
    # name of the sleep or wait that suspended this run, if one did.
    _durable: Any = field(default=None, repr=False, compare=False)
    _suspended_on: str | None = field(default=None, repr=False, compare=False)
    # message.progress(): checks the report and hands it to whoever delivered the message (a
    # worker's report buffer, eager mode's writer): worker/lifecycle.py's progress_reporter.
    _progress: Callable[[Message, Any, Any, Any], None] | None = field(
        default=None, repr=False, compare=False
    )
    # Delivered in a batch handler's batch: a durable sleep or wait would suspend the whole
    # call, so they are refused (a step works as in any handler).
    _batched: bool = field(default=False, repr=False, compare=False)

    def __hash__(self) -> int:
        """By id (equal messages have equal ids): a batch handler keys ``BatchFailed`` by message."""
        return hash(self.id)

    @property
    def scheduled_at(self) -> datetime | None:
        """The tick a periodic schedule enqueued this message for (None for other messages).

        It travels in the dedup key, ``lonnymq.periodic:<schedule id>:<tick ms>``.
        """
        return tick_of(self.dedup_key)

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def extend_lease(self, duration: timedelta | float | None = None) -> None:
        """Hold the message for ``duration`` (default: the worker's lease) from now.

        Raises :class:`~django_lonnymq.exceptions.LeaseLost` when the lease already went
        to another worker.
        """
        if self._extend is None:
            raise RuntimeError("this message was not delivered by a worker; it has no lease")
        if duration is not None and duration_ms("duration", duration, MAX_LEASE) < 1:
            raise InvalidArgument("duration", "must be at least 1 ms", duration)
        self._extend(self, duration)

    async def aextend_lease(self, duration: timedelta | float | None = None) -> None:
        """:meth:`extend_lease` for an ``async def`` handler."""
        from asgiref.sync import sync_to_async

        await sync_to_async(self.extend_lease, thread_sensitive=True)(duration)

    # -- progress (docs/limits-and-progress.md) --------------------------------------------

    def progress(self, done: float, total: float | None = None, note: str = "") -> None:
        """Report how far the handler got: ``done`` of ``total`` (None: unknown), and a note of
        at most 200 characters. Call it as often as you like: a worker writes each message's
        latest report at most every ``LONNYMQ_PROGRESS_INTERVAL`` and once more when the run
        ends. Shown by ``api.message_status``, the message's admin page and the dashboard;
        sends :data:`~django_lonnymq.signals.message_progress`. Bad values raise
        :class:`~django_lonnymq.exceptions.InvalidArgument` and record nothing."""
        if self._progress is None:
            raise NotInHandler()
        self._progress(self, done, total, note)

    async def aprogress(self, done: float, total: float | None = None, note: str = "") -> None:
        """:meth:`progress` for an ``async def`` handler."""
        from asgiref.sync import sync_to_async

        await sync_to_async(self.progress, thread_sensitive=True)(done, total, note)

    # -- durable handlers (docs/durable.md) ----------------------------------------------

    def _runner(self) -> Any:
        if self._durable is None:
            raise NotInHandler()
        return self._durable

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once for this message, across attempts and restarts.

        ``fn`` runs in ``transaction.atomic()`` on the queue's database and its JSON result
        is checkpointed in that transaction; a later run of the handler gets the stored
        result (decoded from JSON) without calling ``fn``. Names are unique within a run.
        """
        return self._runner().step(self, name, fn, args, kwargs)

    def sleep(self, name: str, delay: timedelta | float) -> None:
        """Suspend the message for ``delay`` (at most 366 days), giving its thread and slot
        back; the handler then runs again from the top and this call returns."""
        self._single("sleep")
        self._runner().sleep(self, name, delay)

    def wait(self, name: str, key: str, timeout: timedelta | float | None = None) -> Any:
        """The payload of the event ``key`` (``api.emit_event``), suspending the message
        until it comes; ``None`` when ``timeout`` passes first."""
        self._single("wait")
        return self._runner().wait(self, name, key, timeout)

    def _single(self, what: str) -> None:
        if self._batched:
            raise InvalidArgument(
                what,
                "is for handlers of one message: a batch handler's call cannot suspend one message of its batch",
                self.id,
            )

    async def astep(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """:meth:`step` for an ``async def`` handler (``fn`` is a plain function, run on
        Django's ORM thread)."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.step, thread_sensitive=True)(name, fn, *args, **kwargs)

    async def asleep(self, name: str, delay: timedelta | float) -> None:
        """:meth:`sleep` for an ``async def`` handler."""
        from asgiref.sync import sync_to_async

        await sync_to_async(self.sleep, thread_sensitive=True)(name, delay)

    async def await_event(self, name: str, key: str, timeout: timedelta | float | None = None) -> Any:
        """:meth:`wait` for an ``async def`` handler."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.wait, thread_sensitive=True)(name, key, timeout)
