"""How far a running handler got: ``message.progress(done, total, note)`` and
:func:`django_lonnymq.api.message_status`.

A handler's report is checked here (a typed error names the field, the rule and the value,
before anything is written), then handed to whoever delivered the message: a worker keeps
each message's latest report in memory and writes them all in one statement at most every
``LONNYMQ_PROGRESS_INTERVAL`` (``worker/progress.py``), and once more when the run ends, so a
handler may report as often as it likes; eager mode writes each report in the caller's
transaction. Rows live in ``lonnymq_progress``, never in the message's own row, and are kept
``LONNYMQ_PROGRESS_RETENTION`` after the message left the queue. docs/limits-and-progress.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from . import arguments, statements
from .exceptions import InvalidArgument

# The largest done or total (the schema's CHECK): exact in a double, far beyond any count.
MAX_AMOUNT = 10**15
MAX_NOTE_CHARS = 200


@dataclass(frozen=True)
class Progress:
    """A handler's report: ``done`` of ``total`` (None: no total known), and a short note."""

    done: float
    total: float | None = None
    note: str = ""
    # When the report was written (None: not written yet).
    updated_at: datetime | None = None

    @property
    def fraction(self) -> float | None:
        """``done / total`` (0.0 to 1.0), or None without a total."""
        return None if self.total is None else self.done / self.total

    @property
    def percent(self) -> int | None:
        """The fraction as a whole percentage (rounded down), or None without a total."""
        fraction = self.fraction
        return None if fraction is None else int(fraction * 100)


def _amount(field: str, value: Any, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(field, "must be a number", value)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgument(field, "must be a finite number", value)
    if value < 0 or (positive and value == 0):
        raise InvalidArgument(field, "must be above 0" if positive else "must not be negative", value)
    if value > MAX_AMOUNT:
        raise InvalidArgument(field, f"must be at most {MAX_AMOUNT}", value)
    return float(value)


def report(done: Any, total: Any = None, note: Any = "") -> Progress:
    """A checked report (see :meth:`django_lonnymq.message.Message.progress`)."""
    done_value = _amount("done", done, positive=False)
    total_value = None if total is None else _amount("total", total, positive=True)
    if total_value is not None and done_value > total_value:
        raise InvalidArgument("done", f"must be at most total ({total!r})", done)
    if not isinstance(note, str):
        raise InvalidArgument("note", "must be a string", note)
    if len(note) > MAX_NOTE_CHARS:
        raise InvalidArgument(
            "note", f"must be at most {MAX_NOTE_CHARS} characters", f"{len(note)} characters"
        )
    if "\x00" in note:
        raise InvalidArgument("note", "must not contain NUL characters", note)
    return Progress(done_value, total_value, note)


def written_at(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


@dataclass(frozen=True)
class MessageStatus:
    """Where a message is, and its last progress report (:func:`django_lonnymq.api.message_status`).

    ``state``: ``ready``, ``scheduled``, ``running`` or ``suspended`` while in the queue;
    ``dead`` in the dead letters; ``finished`` once it left the queue (acked, or its dead letter
    purged) with its progress kept. ``attempts`` and ``last_error`` are None once finished.
    """

    id: int
    state: str
    queue: str | None
    channel: str | None
    attempts: int | None
    max_attempts: int | None
    last_error: str | None
    progress: Progress | None


def message_status(message_id: int, *, using: str | None = None) -> MessageStatus | None:
    """The state and last progress report of message ``message_id`` (None: unknown)."""
    arguments.message_id("message_id", message_id)
    found = statements.message_status(id=message_id, on=using)
    if not found:
        return None
    row = found[0]
    progress = (
        None
        if row.done is None
        else Progress(row.done, row.total, row.note or "", written_at(row.updated_at))
    )
    return MessageStatus(
        id=message_id,
        state=row.state,
        queue=row.queue,
        channel=row.channel,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        last_error=row.last_error,
        progress=progress,
    )


def running_progress(
    queue: str, *, limit: int = 10, using: str | None = None
) -> list[tuple[int, str, Progress]]:
    """The latest reports of ``queue``'s running messages, newest first (the dashboard):
    (message id, channel, progress), among the queue's 1,000 newest reports."""
    rows = statements.queue_progress(queue=queue, limit=limit, walk=1000, on=using)
    return [
        (row.message_id, row.channel, Progress(row.done, row.total, row.note, written_at(row.updated_at)))
        for row in rows
    ]
