"""Every error the queue raises, under one base class, and the one place SQL errors map to them.

The SQL functions raise their own SQLSTATEs (class ``LQ``, see ``sql/schema.sql``);
schema CHECK constraints are named ``lonnymq_*``. :func:`translate` turns both into the types
below. ``Retry`` and ``Discard`` are not errors: a handler raises them to steer its message.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

from .bounds import MAX_AHEAD


class LonnyMQError(Exception):
    """Base class of every django-lonnymq error."""


class InvalidArgument(LonnyMQError, ValueError):
    """An argument breaks a rule; the message names the field, the rule and the value."""

    def __init__(self, field: str, rule: str, value: Any = None, *, message: str | None = None):
        self.field = field
        self.rule = rule
        self.value = value
        super().__init__(message or f"{field} {rule}, got {_shown(value)}")


def _shown(value: Any) -> str:
    """``repr(value)``, or what it is when Python refuses to print it (an int of more than
    4,300 digits, alone or inside a container)."""
    try:
        return repr(value)
    except ValueError:
        if isinstance(value, int):
            return f"an integer of about {value.bit_length() * 30103 // 100000 + 1} digits"
        return f"a {type(value).__name__} holding an integer too long to print"


class PayloadError(InvalidArgument):
    """The payload is not JSON-serializable, too large or nested too deep."""


class PriorityWithSchedule(InvalidArgument):
    """Priority moves a message earlier, so it cannot be combined with a future run time."""


class LeaseLost(LonnyMQError):
    """The lease expired and another worker may hold the message now (stale lease token)."""

    def __init__(self, message: str, ids: list[int] | None = None):
        self.ids = ids or []
        super().__init__(message)


class MessageNotFound(LonnyMQError):
    """The message no longer exists: acked, cancelled or dead."""


class UnknownMessage(MessageNotFound, InvalidArgument):
    """``cancel()`` named ids of no message (never enqueued, or already acked, cancelled or
    dead); nothing was cancelled. ``ids`` holds every one of them; the message gives their
    count and the first :attr:`SHOWN` (a call may name a million)."""

    SHOWN = 20

    def __init__(self, ids: list[int | None], message: str | None = None):
        self.ids = ids
        shown = ", ".join("null" if i is None else str(i) for i in ids[: self.SHOWN])
        more = f" and {len(ids) - self.SHOWN} more" if len(ids) > self.SHOWN else ""
        InvalidArgument.__init__(
            self,
            "ids",
            "must name messages that are waiting or running",
            ids,
            message=message
            or f"cannot cancel {len(ids)} message(s): not found (never enqueued, or already acked, "
            f"cancelled or dead); nothing was cancelled: {shown}{more}",
        )


class UnknownPlan(InvalidArgument, LookupError):
    """A plan name that names no plan (``configure_plan`` creates one); nothing was written."""

    def __init__(self, name: Any, message: str | None = None):
        InvalidArgument.__init__(
            self, "plan", "must name an existing plan (configure_plan creates one)", name, message=message
        )


class PlanInUse(LonnyMQError):
    """``delete_plan()`` of a plan that channels follow or that queues give their new
    channels; nothing was deleted. ``channels`` and ``queues`` say how many."""

    def __init__(self, message: str, channels: int = 0, queues: int = 0):
        self.channels = channels
        self.queues = queues
        super().__init__(message)


class Interrupted(BaseException):  # noqa: N818 - like KeyboardInterrupt, not an Exception
    """Raised into a handler's thread to stop it. A BaseException, so that a handler's
    ``except Exception`` does not swallow it; ``finally`` blocks and context managers run."""


class HandlerTimeout(Interrupted):
    """The handler ran past its timeout (``@handler(timeout=...)``, ``LONNYMQ_HANDLER_TIMEOUT``)."""

    def __init__(self, *args: object):
        super().__init__(*(args or ("the handler ran past its timeout",)))


class HandlerCancelled(Interrupted):
    """Someone cancelled the running message (``api.cancel()``, the admin)."""

    def __init__(self, *args: object):
        super().__init__(*(args or ("the message was cancelled while its handler ran",)))


class ChannelGone(LonnyMQError):
    """An enqueue looked its channel up just before the channel was deleted (pruned as idle,
    or ``delete_channel``): nothing was written and the transaction is aborted. Retry the
    transaction: the retry creates the channel again."""


class ChannelNotDeleted(LonnyMQError):
    """A channel's delete (``Channel.delete()``, a queryset's ``delete()``) was refused: it
    holds messages (``outcome`` ``"not_empty"``: purge them, or wait until they are done), or a
    producer or a worker holds it at this moment (``"busy"``: try again). Nothing was deleted:
    a queryset's delete is one transaction."""

    def __init__(self, channel_id: int, outcome: str):
        self.channel_id = channel_id
        self.outcome = outcome
        why = {
            "not_empty": "it holds messages (purge them, or wait until they are done)",
            "busy": "a producer or a worker holds it now (try again)",
        }.get(outcome, outcome)
        super().__init__(f"channel {channel_id} was not deleted: {why}; nothing was deleted")


class LockTableFull(LonnyMQError):
    """The server's lock table is full (SQLSTATE 53200, "out of shared memory"): every write
    into a channel holds an advisory lock until its transaction ends (past 64 channels, one
    per stripe: at most 64 + 1,024 per transaction), so many such transactions at once, or
    other sessions holding many locks, can use up the slots ``max_locks_per_transaction``
    gives the whole server. The transaction is aborted and nothing it wrote stays. Write to
    fewer channels per transaction (docs/scaling.md, "Many channels in one transaction"), or
    raise ``max_locks_per_transaction``."""

    def __init__(self, detail: str):
        self.detail = detail
        super().__init__(
            f"the database server's lock table is full ({detail}): each channel a transaction writes "
            "to holds an advisory lock (or its stripe's) until it ends, and the server has "
            "max_locks_per_transaction x (max_connections + max_prepared_transactions) of them "
            "for every session together; the transaction is aborted: write to fewer channels per "
            "transaction (docs/scaling.md, 'Many channels in one transaction'), or raise "
            "max_locks_per_transaction"
        )


class DatabaseReadOnly(LonnyMQError):
    """The queue's database takes no writes (SQLSTATE 25006): a hot standby, a read-only
    role or ``default_transaction_read_only``, or a transaction opened ``READ ONLY``. Nothing
    was written, and the transaction is aborted. Point ``LONNYMQ_DATABASE`` (or the queue's
    ``LONNYMQ_QUEUE_DATABASES`` entry) at the primary."""

    def __init__(self, detail: str):
        self.detail = detail
        super().__init__(
            f"the queue's database is read-only ({detail}): nothing was written and the transaction is "
            "aborted; queue calls need a database that takes writes (the primary, not a standby or a "
            "read-only role or transaction): check LONNYMQ_DATABASE, LONNYMQ_QUEUE_DATABASES and using="
        )


class CrossDatabaseTransaction(LonnyMQError):
    """A write to a queue on one database while a transaction is open on another and none on
    the queue's: it would commit at once, whatever becomes of the open transaction. Raised
    when ``LONNYMQ_CROSS_DATABASE_ENQUEUE = "raise"`` (nothing was written); ``"warn"`` (the
    default) issues a :class:`CrossDatabaseWarning` and writes."""


class CrossDatabaseWarning(RuntimeWarning):
    """:class:`CrossDatabaseTransaction`, as a warning: the write went ahead and committed at once."""


class UnsupportedIsolation(LonnyMQError):
    """The operation needs READ COMMITTED."""


class NoHandler(LonnyMQError):
    """A worker was asked to serve a queue that has no registered handler."""


class SchemaMissing(LonnyMQError):
    """The queue's tables or functions are missing or older than the code: migrate first."""

    HINT = "run `python manage.py migrate`"

    def __init__(self, detail: str, *, database: str | None = None):
        self.detail = detail
        self.database = database
        where = f" in database {database!r}" if database else ""
        hint = self.HINT
        if database and database != "default":  # the other aliases are migrated one by one
            hint = f"run `python manage.py migrate --database {database}`"
        super().__init__(
            f"django-lonnymq's tables or functions are missing or out of date{where} ({detail}): {hint}"
        )


class UnknownTask(LonnyMQError, LookupError):
    """A task message names a backend alias or a task path this project does not have."""


class WorkerInterrupted(LonnyMQError):
    """The worker was told to exit at once while this task ran (its message comes back)."""


class WorkflowCancelled(LonnyMQError):
    """Recorded in the result of a Django Task step whose workflow was cancelled before the
    step ran: the result ends ``FAILED`` with this error (the task never runs)."""


class DuplicateStep(InvalidArgument):
    """A handler used one step, sleep or wait name twice in one run (docs/durable.md: a loop
    gives each item a name of its own)."""

    def __init__(self, name: str):
        super().__init__(
            "name",
            "must be unique within one run of the handler",
            name,
            message=f"step name {name!r} was already used in this run: give each step, sleep and "
            "wait of a run its own name (in a loop, a name per item)",
        )


class NotInHandler(LonnyMQError):
    """``step``, ``sleep``, ``wait`` or ``progress`` called on a message no worker or eager mode
    delivered."""

    def __init__(self) -> None:
        super().__init__(
            "message.step, sleep, wait and progress work only inside a handler run by a worker or by eager mode"
        )


class Suspended(BaseException):  # noqa: N818 - like Interrupted: a handler's except Exception must not swallow it
    """A durable sleep or wait ends the run here: the message is suspended (given back, no
    attempt spent) and its handler runs again from the top later (docs/durable.md)."""

    def __init__(self, name: str):
        self.name = name
        super().__init__(f"suspended at {name!r}")


class Retry(Exception):  # noqa: N818 - a request, not an error
    """Raise from a handler to retry the message after ``delay`` (counts as an attempt).

    The delay is checked here, where the handler raises it: a bad one is an error of the
    handler (the message fails with it), never of the worker.
    """

    def __init__(self, delay: timedelta | float = 0, reason: str = ""):
        self.delay = _retry_delay(delay)
        self.reason = reason
        super().__init__(reason or f"retry requested after {delay}")


def _retry_delay(delay: object) -> timedelta:
    if isinstance(delay, bool) or not isinstance(delay, (timedelta, int, float)):
        raise InvalidArgument("delay", "must be a timedelta or a number of seconds", delay)
    if isinstance(delay, float) and not math.isfinite(delay):
        raise InvalidArgument("delay", "must be finite", delay)
    if isinstance(delay, (int, float)):
        if not 0 <= delay <= MAX_AHEAD.total_seconds():
            raise InvalidArgument("delay", "must be between 0 and 100 years", delay)
        return timedelta(seconds=delay)
    if not timedelta(0) <= delay <= MAX_AHEAD:
        raise InvalidArgument("delay", "must be between 0 and 100 years", delay)
    return delay


class Snooze(Exception):  # noqa: N818 - a request, not an error
    """Raise from a handler to put the message back for ``delay`` without spending an attempt.

    The message gives back its concurrency slots while it waits and counts the snooze;
    past ``LONNYMQ_MAX_SNOOZES`` snoozes a snooze is a failed attempt instead. The delay
    (a timedelta or seconds, 0 to 100 years) is checked here, as Retry checks its own.
    """

    def __init__(self, delay: timedelta | float = 0):
        self.delay = _retry_delay(delay)
        super().__init__(f"snooze requested for {delay}")


class Discard(Exception):  # noqa: N818 - a request, not an error
    """Raise from a handler to move the message to the dead-letter table at once."""

    def __init__(self, reason: str = "discarded by handler"):
        self.reason = reason
        super().__init__(reason)


class BatchFailed(Exception):  # noqa: N818 - a request, not an error
    """Raise from a batch handler (``@handler(queue, batch=N)``) to fail only the messages it
    names; the others of the batch are acked together.

    ``failures`` maps each failed message (a :class:`~django_lonnymq.Message` or its id) to
    what it comes to: an exception (``Retry(delay)``, ``Snooze``, ``Discard`` or any error,
    retried with backoff) or a text (a failure with that error). Checked here, where the
    handler raises it: a bad mapping is an error of the handler (the whole batch fails with it).
    """

    def __init__(self, failures: Any):
        if not isinstance(failures, Mapping) or not failures:
            raise InvalidArgument("failures", "must be a non-empty mapping of message (or id) to exception or text",
                                  failures)  # fmt: skip
        checked: dict[int, BaseException | str] = {}
        for key, value in failures.items():
            message_id = getattr(key, "id", key)
            if isinstance(message_id, bool) or not isinstance(message_id, int):
                raise InvalidArgument("failures", "keys must be messages or message ids", key)
            if not isinstance(value, (BaseException, str)):
                raise InvalidArgument("failures", "values must be exceptions or texts", value)
            checked[message_id] = value
        self.failures = checked
        super().__init__(f"{len(checked)} message(s) of the batch failed")


_SQLSTATE_TYPES: dict[str, type[LonnyMQError]] = {
    "LQ001": InvalidArgument,
    "LQ002": PriorityWithSchedule,
    "LQ003": LeaseLost,
    "LQ004": MessageNotFound,
    "LQ006": UnsupportedIsolation,
}

_CONSTRAINT_RULES: dict[str, tuple[str, str]] = {
    "lonnymq_channel_queue_length": ("queue", "must be 1 to 100 characters"),
    "lonnymq_channel_name_length": ("channel", "must be 1 to 200 characters"),
    "lonnymq_channel_max_concurrency_positive": ("max_concurrency", "must be positive or null"),
    "lonnymq_channel_release_interval_nonnegative": ("release_interval_ms", "must not be negative"),
    "lonnymq_channel_release_interval_range": ("release_interval_ms", "must be between 0 and 366 days"),
    "lonnymq_channel_queue_not_blank": ("queue", "must not be only blanks"),
    "lonnymq_channel_name_not_blank": ("channel", "must not be only blanks"),
    "lonnymq_message_dequeue_at_range": ("dequeue_at", "must be a time between 1970 and 9999"),
    "lonnymq_channel_in_flight_nonnegative": ("in_flight", "must not be negative"),
    "lonnymq_message_max_attempts_range": ("max_attempts", "must be between 1 and 1000"),
    "lonnymq_message_priority_range": ("priority", "must be between 0 and 100"),
    "lonnymq_message_payload_size": ("payload", "must be at most 8 MiB stored"),
    "lonnymq_workflow_step_output_size": ("output", "must be at most 8 MiB stored"),
    "lonnymq_schedule_payload_depth": (
        "payload",
        "must be nested at most 100 levels deep (the root is level 0)",
    ),
    "lonnymq_message_dedup_key_length": ("dedup_key", "must be 1 to 200 characters"),
    "lonnymq_subscription_topic_length": ("topic", "must be 1 to 200 characters"),
    "lonnymq_subscription_topic_not_blank": ("topic", "must not be only blanks"),
    "lonnymq_subscription_queue_length": ("queue", "must be 1 to 100 characters"),
    "lonnymq_subscription_queue_not_blank": ("queue", "must not be only blanks"),
    "lonnymq_channel_weight_range": ("weight", "must be between 1 and 1000"),
    "lonnymq_channel_round_used_range": ("round_used", "must be between 0 and weight - 1"),
    "lonnymq_channel_rate_complete": ("rate", "needs a count, a period and a burst, or none"),
    "lonnymq_channel_rate_count_range": ("rate.count", "must be between 1 and 1000000"),
    "lonnymq_channel_rate_period_range": ("rate.period", "must be between 1 ms and 366 days"),
    "lonnymq_channel_rate_burst_range": ("rate.burst", "must be between 1 and 1000000"),
    "lonnymq_channel_bucket_level_nonnegative": ("bucket_level", "must not be negative"),
    "lonnymq_queue_config_queue_length": ("queue", "must be 1 to 100 characters"),
    "lonnymq_queue_config_queue_not_blank": ("queue", "must not be only blanks"),
    "lonnymq_queue_config_max_concurrency_positive": ("max_concurrency", "must be positive or null"),
    "lonnymq_queue_config_rate_complete": ("rate", "needs a count, a period and a burst, or none"),
    "lonnymq_queue_config_rate_count_range": ("rate.count", "must be between 1 and 1000000"),
    "lonnymq_queue_config_rate_period_range": ("rate.period", "must be between 1 ms and 366 days"),
    "lonnymq_queue_config_rate_burst_range": ("rate.burst", "must be between 1 and 1000000"),
    "lonnymq_queue_config_has_a_limit": (
        "max_concurrency",
        "or a rate must be set (delete the row for none)",
    ),
    "lonnymq_queue_config_in_flight_nonnegative": ("in_flight", "must not be negative"),
    "lonnymq_queue_config_bucket_level_nonnegative": ("bucket_level", "must not be negative"),
}

# Undefined function, table, column: when the object is one of ours, the app's migrations
# were not applied (or not all of them) to this database.
_UNDEFINED = {"42883", "42P01", "42703"}
_OURS = re.compile(r"\blonnymq_\w+")

_INVALID_TEXT = re.compile(r"^(?P<field>\S+) (?P<rule>.+), got (?P<value>.*)$")


def _root(exc: BaseException) -> BaseException:
    """The psycopg error under Django's wrapper, if any."""
    cause = exc.__cause__
    return cause if cause is not None and hasattr(cause, "sqlstate") else exc


def translate(exc: BaseException) -> LonnyMQError | None:
    """The typed error for a database error raised by the queue's SQL, or None."""
    root = _root(exc)
    sqlstate = getattr(root, "sqlstate", None)
    diag = getattr(root, "diag", None)
    text = (getattr(diag, "message_primary", None) or str(root)).strip()
    if sqlstate in _SQLSTATE_TYPES:
        kind = _SQLSTATE_TYPES[sqlstate]
        if kind is InvalidArgument:
            match = _INVALID_TEXT.match(text)
            field = getattr(diag, "column_name", None) or (match["field"] if match else "argument")
            rule = match["rule"] if match else text
            value = match["value"] if match else None
            return InvalidArgument(field, rule, value, message=text)
        if kind is PriorityWithSchedule:
            return PriorityWithSchedule("priority", "cannot be combined with a future run time", message=text)
        return kind(text)
    if sqlstate == "25006":  # read_only_sql_transaction
        return DatabaseReadOnly(text)
    if sqlstate == "53200" and "max_locks_per_transaction" in (getattr(diag, "message_hint", None) or ""):
        return LockTableFull(text)
    if sqlstate in _UNDEFINED and _OURS.search(text):
        return SchemaMissing(text)
    if sqlstate == "LQ260":
        match = _INVALID_TEXT.match(text)
        return UnknownPlan(match["value"] if match else None, message=text)
    if sqlstate == "LQ261":
        detail = (getattr(diag, "message_detail", None) or "0,0").strip()
        channels, _, queues = detail.partition(",")
        return PlanInUse(text, int(channels or 0), int(queues or 0))
    if sqlstate == "LQ170":
        detail = (getattr(diag, "message_detail", None) or "").strip()
        ids = [None if part == "null" else int(part) for part in detail.split(",") if part]
        return UnknownMessage(ids)
    if sqlstate == "23503" and getattr(diag, "constraint_name", None) == "lonnymq_message_channel_id_fkey":
        return ChannelGone(
            "the channel was deleted (pruned as idle) while this call enqueued into it; nothing was "
            f"enqueued: retry the transaction ({text})"
        )
    if sqlstate == "23514":
        constraint = getattr(diag, "constraint_name", None) or ""
        if constraint in _CONSTRAINT_RULES:
            field, rule = _CONSTRAINT_RULES[constraint]
            return InvalidArgument(field, rule, message=f"{field} {rule} (constraint {constraint})")
    return None


@contextlib.contextmanager
def sql_errors() -> Iterator[None]:
    """Re-raise the queue's SQL errors as their typed exceptions, chained to the original."""
    try:
        yield
    except Exception as exc:
        typed = translate(exc)
        if typed is None:
            raise
        raise typed from exc
