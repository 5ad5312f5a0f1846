"""What a block of code sets for the tasks it enqueues (:func:`channel`, :func:`dedup`), and
the workflow step whose task runs now (:data:`running_step`)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from .. import arguments, bounds
from ..message import Message

_channel: contextvars.ContextVar[str | None] = contextvars.ContextVar("lonnymq_task_channel", default=None)


_dedup: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "lonnymq_task_dedup", default=None
)


# The workflow step message whose task runs now: what workflows.parent_outputs() reads.
running_step: contextvars.ContextVar[Message | None] = contextvars.ContextVar(
    "lonnymq_running_step", default=None
)


@contextlib.contextmanager
def channel(name: str) -> Iterator[None]:
    """Enqueue the tasks of this block into tenant channel ``name``."""
    arguments.channel(name)
    token = _channel.set(name)
    try:
        yield
    finally:
        _channel.reset(token)


@contextlib.contextmanager
def dedup(key: str, on_duplicate: str = "skip") -> Iterator[None]:
    """Enqueue the tasks of this block with dedup key ``key`` (per queue and channel) and mode
    ``on_duplicate``: ``"skip"`` returns the key's result, ``"replace"`` (debounce) and
    ``"update"`` (throttle) change the key's waiting task and return its result (see
    docs/tasks.md). A bad key or mode raises ``InvalidArgument`` here, before any enqueue."""
    arguments.name("dedup_key", key, bounds.MAX_DEDUP_KEY)  # a key is required here: None too is refused
    arguments.dedup_key(key)
    arguments.on_duplicate(on_duplicate, key)
    token = _dedup.set((key, on_duplicate))
    try:
        yield
    finally:
        _dedup.reset(token)
