"""Periodic jobs: ``@periodic`` declarations, their sync into ``lonnymq_schedule``, and ticking.

A schedule enqueues one message per tick into its queue. Any worker serving that queue
claims due schedule rows ``FOR UPDATE SKIP LOCKED`` (named query ``claim_schedules``),
computes the ticks here (cron through cronsim, in the schedule's time zone), and calls
``lonnymq_fire_schedule_v1``, which enqueues each tick with the dedup key
``lonnymq.periodic:<schedule id>:<tick ms>`` and writes the next tick, all in one
transaction: each tick is enqueued once however many workers run. A handler reads the tick
back as :attr:`Message.scheduled_at <django_lonnymq.Message.scheduled_at>`.

Ticks are whole seconds (cron) or multiples of the interval since the Unix epoch (``every``).
After downtime, at most ``catch_up`` of the missed ticks are enqueued: the latest ones.
Daylight saving time follows Debian's cron (cronsim): docs/periodic.md.

Every cron computation is bounded (steps of each walk, steps and CPU time of one schedule's
computation at a check, the wall time of a check's computations): a walk that does not end
fails its own schedule, never the worker (docs/periodic.md, "Bounds").
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, TypeVar, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import psycopg
from cronsim import CronSim, CronSimError

from . import arguments, bounds, statements
from .bounds import MAX_INTERVAL
from .conf import settings
from .exceptions import InvalidArgument, LonnyMQError, sql_errors
from .message import tick_of  # noqa: F401 - schedules.tick_of: the tick key lives with the message

logger = logging.getLogger("django_lonnymq.schedules")

F = TypeVar("F")

# Schedules claimed per transaction; a full batch makes the worker claim again at once.
CLAIM_BATCH = 100
MIN_EVERY = bounds.MIN_EVERY
MAX_CATCH_UP = bounds.MAX_CATCH_UP
_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 30.0

# A cron walk is cronsim's loop from a time to the next (or previous) match, one step per turn
# (a month, day, hour or minute that does not match). cronsim gives up after 50 years, about
# 2,000 steps at most; across some clock changes it walks back forever (Greenland's
# 2026-03-28: docs/periodic.md, "Bounds"). A walk past this many steps is given up.
CRON_WALK_STEPS = 10_000
# One schedule's computation at a check (its due ticks and its next tick): at most this many
# steps in all (1,000 ticks of catch-up take about 12,000) and this much CPU time of the
# thread (not wall time: handler threads holding the GIL cannot make a sound walk fail).
CRON_CHECK_STEPS = 200_000
CRON_CHECK_SECONDS = 2.0
# A tick check starts no schedule's computation after this many seconds (it always makes
# the first); the rest of its batch stays due, and the worker checks again at once.
TICK_BUDGET = 0.5


# ---------------------------------------------------------------------------------------
# Timing: when a schedule ticks
# ---------------------------------------------------------------------------------------


def check_timezone(value: Any, field: str = "timezone") -> str:
    """An IANA time zone name (``"Europe/Paris"``, ``"UTC"``): never a file of the host's zone
    directory that is not a zone (``"localtime"``, ``"posixrules"``, ``"right/..."``)."""
    if not isinstance(value, str):
        raise InvalidArgument(field, "must be an IANA time zone name such as 'Europe/Paris'", value)
    arguments.name(field, value, bounds.MAX_QUEUE_NAME)
    _zone(value, field)
    return value


# Files a zone directory may hold that ZoneInfo reads but that are not IANA zones: the host's
# own zone (its meaning depends on the host) and the rules of POSIX TZ strings.
# available_timezones() leaves out posix/ and right/ but lists "localtime" where the
# directory holds it.
_NOT_ZONES = frozenset({"localtime", "posixrules"})


@lru_cache(maxsize=1)
def _iana_names() -> frozenset[str]:
    """The IANA zone names of this host's time zone data (or the tzdata package), and "UTC"."""
    return frozenset(available_timezones() - _NOT_ZONES) | {"UTC"}


@lru_cache(maxsize=256)
def _zone_cached(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def _zone(name: str, field: str = "timezone") -> ZoneInfo:
    if name in _NOT_ZONES:
        raise InvalidArgument(
            field,
            "must be an IANA time zone name such as 'Europe/Paris', not a file of the host's "
            "zone directory (its meaning would depend on the host)",
            name,
        )
    try:
        if name not in _iana_names():
            raise ZoneInfoNotFoundError(name)
        return _zone_cached(name)
    except (ZoneInfoNotFoundError, ValueError, OSError, TypeError):
        raise InvalidArgument(
            field, "must be a known IANA time zone name such as 'Europe/Paris'", name
        ) from None


def check_cron(value: Any, field: str = "cron") -> str:
    """A five-field cron expression that matches some time in the next 50 years."""
    if not isinstance(value, str):
        raise InvalidArgument(field, "must be a cron expression string such as '*/5 * * * *'", value)
    arguments.name(field, value, bounds.MAX_CHANNEL_NAME)
    if len(value.split()) != 5:
        raise InvalidArgument(
            field,
            "must have five fields (minute hour day-of-month month day-of-week); "
            "use every=timedelta(seconds=...) for schedules under a minute",
            value,
        )
    try:
        walk = _Walk(value, datetime.now(UTC), reverse=False, budget=_Budget())
    except CronSimError as exc:
        raise InvalidArgument(field, f"is not a valid cron expression ({exc})", value) from None
    for _ in _walked(walk, value, "UTC", field):
        return value
    raise InvalidArgument(field, "never matches within 50 years", value)


def check_every(value: Any, field: str = "every") -> int:
    """A fixed interval of at least 1 second and at most 366 days, in ms."""
    if isinstance(value, bool) or not isinstance(value, (timedelta, int, float)):
        raise InvalidArgument(field, "must be a timedelta or a number of seconds", value)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgument(field, "must be finite", value)
    try:
        seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    except OverflowError:  # an int past a float's range
        raise InvalidArgument(field, "must be between 1 second and 366 days", value) from None
    if seconds <= 0:
        raise InvalidArgument(field, "must be longer than zero", value)
    if seconds < MIN_EVERY.total_seconds() or seconds > MAX_INTERVAL.total_seconds():
        raise InvalidArgument(field, "must be between 1 second and 366 days", value)
    return round(seconds * 1000)


class _Budget:
    """What one schedule's computation may spend: steps of its walks, and CPU time."""

    def __init__(self, steps: int = CRON_CHECK_STEPS, seconds: float = CRON_CHECK_SECONDS):
        self.steps = steps
        self.seconds = seconds
        self.left = steps
        self.deadline = time.thread_time() + seconds


class _Exhausted(Exception):  # noqa: N818 - internal, turned into InvalidArgument
    """A walk went past a bound; ``args[0]`` says which."""


class _Walk(CronSim):
    """cronsim's walk, counting its steps against :data:`CRON_WALK_STEPS` and a :class:`_Budget`.

    Each turn of cronsim's search loop (``advance``/``reverse``) starts with the month, so
    counting those calls counts the turns.
    """

    def __init__(self, expr: str, dt: datetime, *, reverse: bool, budget: _Budget):
        super().__init__(expr, dt, reverse=reverse)
        self.budget = budget
        self.walk_left = CRON_WALK_STEPS

    def __next__(self) -> datetime:
        self.walk_left = CRON_WALK_STEPS
        return super().__next__()

    def _step(self) -> None:
        self.walk_left -= 1
        budget = self.budget
        budget.left -= 1
        if self.walk_left < 0:
            raise _Exhausted(f"found no tick within {CRON_WALK_STEPS} steps")
        if budget.left < 0:
            raise _Exhausted(f"used up the {budget.steps} steps of one computation")
        if budget.left % 64 == 0 and time.thread_time() > budget.deadline:
            raise _Exhausted(f"used up the {budget.seconds:g} s of CPU time of one computation")

    def advance_month(self) -> None:
        self._step()
        super().advance_month()

    def reverse_month(self) -> None:
        self._step()
        super().reverse_month()


def _walked(walk: _Walk, cron: str, timezone: str, field: str = "cron") -> Iterator[int]:
    """The ticks of a walk in ms; a bound passed raises InvalidArgument saying where."""
    start = walk.dt.replace(tzinfo=walk.fixup_tz) if walk.fixup_tz else walk.dt
    while True:
        try:
            moment = next(walk)
        except StopIteration:
            return
        except _Exhausted as exc:
            direction = "back" if walk.tick_direction < 0 else "forward"
            raise InvalidArgument(
                field,
                f"could not be computed in {timezone}: the walk {direction} from "
                f"{start.isoformat()} {exc.args[0]}",
                cron,
            ) from None
        yield _ms(moment)


def _dt(ms: int, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(ms // 1000, tz=UTC).astimezone(zone)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp()) * 1000


@dataclass(frozen=True)
class Timing:
    """A cron expression in a time zone, or a fixed interval; computes ticks in ms."""

    cron: str | None
    every_ms: int | None
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every_ms is None):
            raise InvalidArgument("cron", "or every must be given, not both", self.cron)
        if self.cron is not None:
            check_cron(self.cron)
        else:
            check_every(timedelta(milliseconds=self.every_ms or 0))
        _zone(self.timezone)

    def _walk(self, from_ms: int, *, reverse: bool, budget: _Budget | None) -> Iterator[int]:
        assert self.cron is not None
        zone = _zone(self.timezone)
        walk = _Walk(self.cron, _dt(from_ms, zone), reverse=reverse, budget=budget or _Budget())
        return _walked(walk, self.cron, self.timezone)

    def next_after(self, ms: int, budget: _Budget | None = None) -> int:
        """The first tick later than ``ms``. A walk past its bounds raises InvalidArgument;
        ``budget`` is shared with the rest of a schedule's computation (default: its own)."""
        if self.every_ms is not None:
            return (ms // self.every_ms + 1) * self.every_ms
        for at in self._walk(ms, reverse=False, budget=budget):
            return at
        raise InvalidArgument("cron", "never matches within 50 years", self.cron)

    def due(self, first_ms: int, now_ms: int, limit: int, budget: _Budget | None = None) -> list[int]:
        """The ticks from ``first_ms`` to ``now_ms`` (both included): the latest ``limit``, in order."""
        if first_ms > now_ms:
            return []
        if self.every_ms is not None:
            latest = now_ms // self.every_ms * self.every_ms
            if latest < first_ms:
                return []
            count = min(limit, (latest - first_ms) // self.every_ms + 1)
            return [latest - self.every_ms * i for i in range(count - 1, -1, -1)]
        budget = budget or _Budget()
        # Going back from now finds where the latest `limit` ticks start without walking a
        # long downtime tick by tick; the ticks themselves come from walking forward, as
        # next_after() does, so both agree on every DST day.
        start = first_ms
        found = 0
        for at in self._walk(now_ms + 1000, reverse=True, budget=budget):
            if at < first_ms:
                break
            start, found = at, found + 1
            if found >= limit:
                break
        ticks: deque[int] = deque(maxlen=limit)
        for at in self._walk(start - 1000, reverse=False, budget=budget):
            if at > now_ms:
                break
            if at >= first_ms:
                ticks.append(at)
        return list(ticks)


@lru_cache(maxsize=1024)
def _timing(cron: str | None, every_ms: int | None, timezone: str) -> Timing:
    return Timing(cron, every_ms, timezone)


# ---------------------------------------------------------------------------------------
# Declarations in code
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Declaration:
    """One ``@periodic`` schedule as the code declares it."""

    name: str
    queue: str
    channel: str
    timing: Timing
    payload: Any
    catch_up: int
    max_attempts: int | None
    target: str

    def declared(self) -> dict[str, Any]:
        """What the ``declared`` column holds (and what sync compares)."""
        return {
            "queue": self.queue,
            "channel": self.channel,
            "cron": self.timing.cron,
            "every_ms": self.timing.every_ms,
            "timezone": self.timing.timezone,
            "payload": self.payload,
            "catch_up": self.catch_up,
            "max_attempts": self.max_attempts,
        }


_declarations: dict[str, Declaration] = {}
_discovered = False


def periodic(
    cron: str | None = None,
    *,
    every: timedelta | float | None = None,
    queue: str | None = None,
    payload: Any = None,
    channel: str = "default",
    name: str | None = None,
    timezone: str | None = None,
    catch_up: int = 1,
    max_attempts: int | None = None,
) -> Callable[[F], F]:
    """Enqueue a message into ``queue`` on a schedule: a cron expression or ``every``.

    Decorate a handler (``queue`` is required) or a Django ``@task`` of the LonnyMQ backend
    (its queue, ``payload`` as its keyword arguments). ``name`` (default: the function's
    dotted path) identifies the schedule across deploys; ``timezone`` (default UTC) is the
    cron expression's zone; ``catch_up`` is how many ticks missed while no worker ran are
    enqueued (the latest ones). Bad values raise
    :class:`~django_lonnymq.exceptions.InvalidArgument` here, when the module is imported.
    """
    if cron is not None and every is not None:
        raise InvalidArgument("every", "cannot be combined with a cron expression", every)
    if cron is None and every is None:
        raise InvalidArgument("cron", "must be given (or every=timedelta(...))", None)
    zone = "UTC" if timezone is None else check_timezone(timezone)
    timing = Timing(
        check_cron(cron) if cron is not None else None,
        check_every(every) if every is not None else None,
        zone,
    )
    arguments.channel(channel)
    if queue is not None:
        arguments.queue(queue)
    if name is not None:
        arguments.name("name", name, bounds.MAX_SCHEDULE_NAME)
    catch_up = arguments.integer("catch_up", catch_up, 1, MAX_CATCH_UP)
    if max_attempts is not None:
        max_attempts = arguments.integer("max_attempts", max_attempts, 1, bounds.MAX_ATTEMPTS)
    body = {} if payload is None else payload
    json.loads(arguments.payload(body))  # a clear PayloadError now, never at the first tick

    def declare(target: F) -> F:
        target_queue, message = queue, body
        if _is_task(target):
            from .tasks import periodic_message

            target_queue, message = periodic_message(cast(Any, target), body)
            if queue is not None and queue != target_queue:
                raise InvalidArgument(
                    "queue", f"must be the task's queue ({target_queue!r}) or omitted", queue
                )
            path = str(cast(Any, target).module_path)
        else:
            if not callable(target):
                raise InvalidArgument("periodic", "must decorate a function or a task", target)
            path = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"
        if target_queue is None:
            raise InvalidArgument("queue", "must be given: the queue whose handler runs each tick", None)
        schedule_name = arguments.name("name", name if name is not None else path, bounds.MAX_SCHEDULE_NAME)
        declaration = Declaration(
            name=schedule_name,
            queue=target_queue,
            channel=channel,
            timing=timing,
            payload=json.loads(arguments.payload(message)),
            catch_up=catch_up,
            max_attempts=max_attempts,
            target=path,
        )
        existing = _declarations.get(schedule_name)
        if existing is not None and existing != declaration:
            raise InvalidArgument(
                "name",
                f"is used by two schedules ({existing.target} and {path}); give each a name=",
                schedule_name,
            )
        _declarations[schedule_name] = declaration
        return target

    return declare


def _is_task(obj: Any) -> bool:
    return all(hasattr(obj, attr) for attr in ("module_path", "queue_name", "backend", "enqueue"))


def declarations() -> list[Declaration]:
    """Every schedule declared with ``@periodic`` in this process, by name."""
    return [_declarations[name] for name in sorted(_declarations)]


def forget(name: str) -> None:
    """Forget a declaration (for tests)."""
    _declarations.pop(name, None)


def _after_autodiscover() -> None:
    """The handler modules are imported: the declarations are complete, sync may delete."""
    global _discovered
    from django.conf import settings as django_settings

    # @periodic on a @task lives in an app's tasks module: import those too.
    for config in getattr(django_settings, "TASKS", {}).values():
        if str(config.get("BACKEND", "")).startswith(f"{__package__}."):
            from .tasks import known_tasks

            known_tasks()
            break
    _discovered = True


def _register_hook() -> None:
    from .registry import add_discovery_hook

    add_discovery_hook(_after_autodiscover)


# ---------------------------------------------------------------------------------------
# Database side (a psycopg connection: the worker's control connection, or a test's)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyncResult:
    added: int
    changed: int
    removed: int


def sync(
    conn: Any, found: Iterable[Declaration] | None = None, queues: Sequence[str] | None = None
) -> SyncResult:
    """Make the table's code-declared schedules those of ``found`` (default: this process's).

    New and changed declarations are written whatever their queue; a declared row no longer
    declared is deleted only if its queue is one of ``queues`` (None: any queue), so workers
    whose code declares different schedules do not delete each other's.
    """
    chosen = list(declarations() if found is None else found)
    with sql_errors(), conn.transaction():
        now_ms = int(statements.now_ms(on=conn))
        params = {
            "queues": None if queues is None else list(queues),
            "names": [d.name for d in chosen],
            "declared": [json.dumps(d.declared(), sort_keys=True) for d in chosen],
            "next_tick_ats": [_first_tick_or_now(d, now_ms) for d in chosen],
        }
        added, changed, removed = statements.sync_schedules(**params, on=conn)[0]
    return SyncResult(int(added), int(changed), int(removed))


def _first_tick_or_now(declaration: Declaration, now_ms: int) -> int:
    """A declaration's first tick from now; now if it cannot be computed, so that the next
    check parks that schedule with the reason (one declaration never stops the others' sync)."""
    try:
        return declaration.timing.next_after(now_ms)
    except InvalidArgument as exc:
        logger.error("schedule %s: %s; the next tick check parks it", declaration.name, exc)
        return now_ms


def tick(
    conn: Any,
    queues: Sequence[str],
    *,
    now_ms: int | None = None,
    limit: int = CLAIM_BATCH,
    budget: float = TICK_BUDGET,
) -> int:
    """Enqueue the due ticks of ``queues``' schedules, in one transaction. Returns how many
    schedules it fired or parked; ``now_ms`` replaces the database's clock (tests). After
    ``budget`` seconds of computing it starts no other schedule's: those stay due."""
    return _check(conn, queues, now_ms=now_ms, limit=limit, budget=budget)[0]


def _check(
    conn: Any, queues: Sequence[str], *, now_ms: int | None, limit: int, budget: float
) -> tuple[int, bool]:
    """:func:`tick`; and whether schedules may be due still (a full batch, or one cut short)."""
    common = {
        "default_max_attempts": settings.MAX_ATTEMPTS,
        "priority_step_ms": settings.ms("PRIORITY_STEP"),
        "tolerance_ms": settings.ms("WAKE_TOLERANCE"),
    }
    with sql_errors(), conn.transaction():
        rows = statements.claim_schedules(queues=list(queues), now_ms=now_ms, limit=limit, on=conn)
        # Compute every tick first, holding no lock but the claimed schedule rows' (for a
        # bounded time: each computation, and the check's budget), then fire: no enqueue's
        # channel lock is ever held while a computation runs.
        stop_at = time.monotonic() + budget
        fires: list[tuple[dict[str, Any], str | None]] = []
        for row in rows:
            if fires and time.monotonic() >= stop_at:
                logger.info("periodic schedules: %d due ones left for the next check", len(rows) - len(fires))
                break
            fires.append(_computed(row))
        for fire, error in fires:
            schedule_id = fire["id"]
            try:
                with conn.transaction():  # a savepoint: one schedule's failure is its own
                    statements.fire_schedule(**fire, error=error, **common, on=conn)
            except psycopg.OperationalError:
                if conn.broken:
                    raise
                # A cancelled statement, a lock or serialization conflict: it stays due and is
                # tried again at the next check; the others go on now.
                logger.warning("schedule %s could not tick now; trying again at the next check", schedule_id)
            except (psycopg.Error, LonnyMQError) as exc:  # what it enqueues is refused: park it, say why
                logger.error("schedule %s cannot tick: %s", schedule_id, _first_line(exc))
                parked = {**fire, "ticks": [], "next_tick_at": None, "error": _first_line(exc)}
                statements.fire_schedule(**parked, **common, on=conn)
    return len(fires), len(fires) < len(rows) or len(rows) >= limit


def _computed(row: Sequence[Any]) -> tuple[dict[str, Any], str | None]:
    """A claimed schedule's ``fire_schedule`` arguments, and the error that parks it (a timing
    that cannot be computed within the bounds, or a row written around the checks)."""
    schedule_id, cron, every_ms, zone, catch_up, next_tick_at, now = row
    error = None
    try:
        timing = _timing(cron, every_ms, zone)
        budget = _Budget()
        ticks = timing.due(next_tick_at, now, catch_up, budget)
        following: int | None = timing.next_after(now, budget)
    except InvalidArgument as exc:
        ticks, following, error = [], None, str(exc)
    except Exception as exc:  # noqa: BLE001 - whatever a row holds, it parks only itself
        ticks, following, error = [], None, _first_line(exc)
    if error is not None:
        logger.error("schedule %s cannot tick: %s", schedule_id, error)
    return {"id": schedule_id, "claimed_at": next_tick_at, "ticks": ticks, "next_tick_at": following}, error


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def first_tick(cron: str | None, every_ms: int | None, timezone: str, now_ms: int | None = None) -> int:
    """The first tick after now (or ``now_ms``) of a timing, for a schedule saved now."""
    return Timing(cron, every_ms, timezone).next_after(arguments.now_ms() if now_ms is None else now_ms)


def first_tick_on_insert(sender: type[Any], instance: Any, **kwargs: object) -> None:
    """``pre_save``: a schedule inserted through the ORM without a next tick ticks first at its
    first tick from now (or is refused at save time when its timing cannot be computed), never
    sits silently untimed. Connected for every sender by the app's ``ready()``, so a data
    migration's historical ``Schedule`` (and a fixture's raw save) are timed too."""
    if sender._meta.label != "django_lonnymq.Schedule" or not instance._state.adding:
        return
    if not getattr(instance, "enabled", False) or getattr(instance, "next_tick_at", 0) is not None:
        return
    instance.next_tick_at = first_tick(instance.cron, instance.every_ms, instance.timezone)


def worker_duty(queues: Sequence[str], poll_interval: float, using: str) -> Ticker:
    """Each worker's schedule ticks (registered with :mod:`django_lonnymq.worker.duties` by the
    app's ``ready()``): the schedules of its queues, synced at its first maintenance step."""
    return Ticker(queues, interval=poll_interval, using=using)


class Ticker:
    """A worker's periodic duty: sync the declarations once, then tick on its own clock.

    :meth:`run` never raises: a failure is logged and retried after a back-off, so no
    schedule (or database error) can stop the worker. A run computes for at most ``budget``
    seconds plus one schedule's bounded computation (:data:`CRON_CHECK_STEPS`,
    :data:`CRON_CHECK_SECONDS`), so the worker's heartbeat and signals are never held up long.
    """

    def __init__(
        self, queues: Sequence[str], *, interval: float, budget: float = TICK_BUDGET, using: str | None = None
    ):
        """``using``: the worker's database; with queues on several (LONNYMQ_QUEUE_DATABASES)
        it syncs only the schedules of the queues that live there (or that it serves)."""
        self.queues = list(queues)
        self.using = using
        self.interval = interval
        self.budget = budget
        self.synced = False
        self._next_at = 0.0
        self._backoff = 0.0
        self._warned = False

    def run(self, conn: Any) -> None:
        now = time.monotonic()
        if conn is None or now < self._next_at:
            return
        try:
            if not self.synced:
                self._sync(conn)
            _, more = _check(conn, self.queues, now_ms=None, limit=CLAIM_BATCH, budget=self.budget)
        except Exception as exc:  # noqa: BLE001 - a tick must never stop the worker
            base = min(self._backoff * 2, _BACKOFF_MAX) if self._backoff else _BACKOFF_FIRST
            self._backoff = base * random.uniform(0.75, 1.0)
            self._next_at = time.monotonic() + self._backoff
            root = exc.__cause__ or exc
            logger.error(
                "periodic schedules of %s: %s (%s); trying again in %.1fs",
                ", ".join(self.queues),
                type(root).__name__,
                (str(root).strip().splitlines() or [""])[0],
                self._backoff,
            )
            return
        self._backoff = 0.0
        self._next_at = now if more else now + self.interval

    def _here(self) -> list[Declaration] | None:
        """The declarations this worker's database holds (None: all, with one database)."""
        if self.using is None or not settings.QUEUE_DATABASES:
            return None
        from .routing import queue_database

        return [d for d in declarations() if d.queue in self.queues or queue_database(d.queue) == self.using]

    def _sync(self, conn: Any) -> None:
        if not _discovered:
            # Without the handler modules imported, "not declared" means nothing: never delete.
            if not self._warned:
                logger.warning("handler modules were not autodiscovered: schedules are not synced")
                self._warned = True
            self.synced = True
            return
        result = sync(conn, self._here(), queues=self.queues)
        self.synced = True
        logger.info(
            "periodic schedules synced: %d declared (%d added, %d changed, %d removed)",
            len(_declarations),
            result.added,
            result.changed,
            result.removed,
        )


_register_hook()
