"""Durable handlers (docs/durable.md): what ``Message.step``, ``sleep`` and ``wait`` do.

A worker (and eager mode) gives each message it delivers a :class:`Durable` bound to the
queue's database. A step's ``fn`` runs in ``transaction.atomic()`` there and its result is
checkpointed in that same transaction (``lonnymq_step_save_v1``, which also checks that the
lease is still held); a sleep or a wait that cannot go on raises :class:`Suspended`, which
ends the run with a ``suspend`` outcome (``lonnymq_suspend_v1``): the message is given back,
no attempt spent, and its handler runs again from the top when its time or its event comes.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import transaction

from . import arguments, bounds, jsontext, statements
from .conf import settings
from .durations import duration_ms
from .exceptions import DuplicateStep, InvalidArgument, Suspended

logger = logging.getLogger("django_lonnymq.worker")

# Eager mode: a sleep goes on at once unless a test asks for real sleeps (testing.eager_sleeps).
_sleep_at_once: contextvars.ContextVar[bool] = contextvars.ContextVar("lonnymq_sleep_at_once", default=True)


def check_name(name: Any, field: str = "name") -> str:
    if not isinstance(name, str):
        raise InvalidArgument(field, "must be a string", name)
    if not 1 <= len(name) <= bounds.MAX_STEP_NAME:
        raise InvalidArgument(field, f"must be 1 to {bounds.MAX_STEP_NAME} characters", name)
    if "\x00" in name:
        raise InvalidArgument(field, "must not contain NUL characters", name)
    return name


def check_key(key: Any) -> str:
    if not isinstance(key, str):
        raise InvalidArgument("key", "must be a string", key)
    if not 1 <= len(key) <= bounds.MAX_EVENT_KEY or not key.strip():
        raise InvalidArgument("key", f"must be 1 to {bounds.MAX_EVENT_KEY} characters, not only blanks", key)
    if "\x00" in key:
        raise InvalidArgument("key", "must not contain NUL characters", key)
    return key


def json_text(value: Any, field: str) -> str:
    """``value`` as JSON text of at most ``bounds.MAX_STEP_RESULT`` bytes (no NaN, no NUL)."""
    return arguments.payload(value, field, max_bytes=bounds.MAX_STEP_RESULT)


def _decoded(text: str | None) -> Any:
    return None if text is None else jsontext.decode(text)


class Durable:
    """Steps, sleeps and waits of one delivery of one message, on the database ``using``."""

    def __init__(self, using: str, *, eager: bool = False) -> None:
        self.using = using
        self.eager = eager
        self.names: set[str] = set()
        # Eager mode: called after each checkpoint commits (its savepoint moves past it).
        self.on_checkpoint: Callable[[], None] = lambda: None

    def _claim(self, name: Any) -> str:
        name = check_name(name)
        if not self.eager and transaction.get_connection(self.using).in_atomic_block:
            # Its checkpoint would commit only with the caller's block, and a suspension
            # would roll it back: the step would run again.
            raise InvalidArgument(
                "name", "must not be used inside the handler's own transaction.atomic() block", name
            )
        if name in self.names:
            raise DuplicateStep(name)
        self.names.add(name)
        return name

    def step(self, message: Any, name: Any, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        name = self._claim(name)
        if not callable(fn):
            raise InvalidArgument("fn", "must be callable", fn)
        ident = {"id": message.id, "name": name}
        for kind, result, _done in statements.step_get(**ident, on=self.using):
            if kind != "step":
                raise InvalidArgument("name", f"is already a {kind} of this message", name)
            return _decoded(result)
        with transaction.atomic(using=self.using):
            value = fn(*args, **kwargs)
            text = json_text(value, "result")
            params = {**ident, "token": str(message.lease_token), "result": text}
            statements.step_save(**params, on=self.using)
        self.on_checkpoint()
        # What a re-run will get: the stored JSON, decoded (a tuple comes back as a list).
        return jsontext.decode(text)

    def sleep(self, message: Any, name: Any, delay: Any) -> None:
        name = self._claim(name)
        delay_ms = duration_ms("delay", delay, bounds.MAX_SLEEP)
        if self.eager and _sleep_at_once.get():
            delay_ms = 0
        state, _result, _until = self._pause(message, name, None, delay_ms)
        if state == "suspend" and self.eager and _sleep_at_once.get():
            state = "go"  # a sleep reached under real sleeps, resumed after eager_sleeps ended
        if state == "suspend":
            message._suspended_on = name
            raise Suspended(name)

    def wait(self, message: Any, name: Any, key: Any, timeout: Any) -> Any:
        name = self._claim(name)
        key = check_key(key)
        timeout_ms = None if timeout is None else duration_ms("timeout", timeout, bounds.MAX_SLEEP)
        state, result, _until = self._pause(message, name, key, timeout_ms)
        if state == "suspend":
            message._suspended_on = name
            raise Suspended(name)
        return _decoded(result) if state == "event" else None

    def _pause(self, message: Any, name: str, key: str | None, delay_ms: int | None) -> tuple[str, Any, Any]:
        params = {"id": message.id, "token": str(message.lease_token), "name": name, "key": key,
                  "delay_ms": delay_ms}  # fmt: skip
        with transaction.atomic(using=self.using):
            [row] = statements.durable_pause(**params, on=self.using)
        self.on_checkpoint()
        return row.state, row.result, row.until_ms


@contextmanager
def real_sleeps() -> Iterator[None]:
    """Eager mode: sleeps suspend as with a worker inside the block (testing.eager_sleeps)."""
    token = _sleep_at_once.set(False)
    try:
        yield
    finally:
        _sleep_at_once.reset(token)


# How much of a step's result the admin shows.
RESULT_EXCERPT_CHARS = 200


def checkpoints(message_id: int, *, using: str | None = None) -> list[statements.Checkpoint]:
    """A message's checkpoints in the order they were written (the admin's steps table)."""
    return statements.message_steps(id=message_id, chars=RESULT_EXCERPT_CHARS, on=using)


def suspended_on(found: list[statements.Checkpoint], now_ms: int) -> statements.Checkpoint | None:
    """The pending sleep or wait among a message's checkpoints, if it is suspended on one (a
    resumed one is due: its time is up, and its next run ends it)."""
    return next(
        (c for c in found if c.kind != "step" and not c.done and (c.until_ms is None or c.until_ms > now_ms)),
        None,
    )


def suspended_counts(*, using: str | None = None) -> dict[str, int]:
    """Suspended messages (a pending sleep or wait, not running) per queue, on one database."""
    return {str(queue): int(n) for queue, n in statements.suspended_counts(on=using)}


# How often each worker prunes old events and the checkpoints of messages that are gone, and
# how many of each one call deletes (a call that deleted a full batch runs again next step).
PRUNE_INTERVAL = 60.0
PRUNE_BATCH = 1000


def worker_duty(queues: Any, poll_interval: float, using: str) -> Pruner:
    """Each worker's durable housekeeping (registered with worker/duties.py by ``ready()``)."""
    return Pruner()


class Pruner:
    """Events older than ``LONNYMQ_EVENT_RETENTION``, checkpoints whose message is neither
    waiting, running nor dead. Never raises: a failure is logged and tried again later."""

    def __init__(self, interval: float = PRUNE_INTERVAL) -> None:
        self.interval = interval
        self._next_at = 0.0

    def run(self, conn: Any) -> None:
        now = time.monotonic()
        if conn is None or now < self._next_at:
            return
        self._next_at = now + self.interval
        try:
            params = {"event_retention_ms": settings.ms("EVENT_RETENTION"), "limit": PRUNE_BATCH}
            pruned = int(statements.durable_prune(**params, on=conn) or 0)
        except Exception as exc:  # noqa: BLE001 - housekeeping must never stop the worker
            logger.error("durable housekeeping: %s: %s", type(exc).__name__, exc)
            return
        if pruned >= PRUNE_BATCH:
            self._next_at = now
