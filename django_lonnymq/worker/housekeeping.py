"""The worker's housekeeping, each duty on its own clock, from the control thread's
maintenance step (never one call per message):

- :class:`Leases`: the heartbeat that extends the leases held (and learns of cancels), and
  a handler's own ``message.extend_lease()``;
- :class:`Reaper`: messages whose lease expired, anyone's, back to their queue;
- :class:`Pruner`: idle, empty channels nobody configured, deleted (``LONNYMQ_CHANNEL_IDLE_PRUNE``);
- :class:`Presence`: the worker's ``lonnymq_worker`` row (read by :mod:`django_lonnymq.workers`);
- :class:`Samples`: the dashboard's history (:mod:`django_lonnymq.sampling`), an observer of
  the maintenance tick;
- :class:`Vacuum`: the channel and wake-up mark tables, vacuumed when their dead row
  versions pile up (``LONNYMQ_VACUUM_THRESHOLD``), whether autovacuum comes or not;
- the duties features register (:mod:`.duties`): the periodic schedules of the worker's
  queues (:class:`django_lonnymq.schedules.Ticker`) are one.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from django.utils import timezone

from .. import statements
from ..bounds import MAX_INTERVAL
from ..conf import settings, to_ms
from ..exceptions import LeaseLost
from ..message import Message
from ..sampling import count_cap, interval_ms, keep_ms
from . import duties
from .connection import ControlConnection
from .held import Held
from .observer import Observer, Observers
from .progress import Reports
from .running import Control
from .stats import Stats

logger = logging.getLogger("django_lonnymq.worker")


class Leases:
    """Keeps the leases of the messages held, a third of the lease apart."""

    def __init__(
        self, connection: ControlConnection, held: Held, control: Control, lease_ms: int, using: str
    ):
        self.connection = connection
        self.held = held
        self.control = control
        self.lease_ms = lease_ms
        self.using = using
        self.next_at = 0.0  # 0: nothing held since the last heartbeat

    def fetched(self) -> None:
        """Messages were leased: the heartbeat is due a third of the lease from now."""
        if self.next_at == 0.0:
            self.next_at = time.monotonic() + self.lease_ms / 3000

    def due_now(self) -> None:
        """A cancel was notified: run the heartbeat (which reads the cancel marks) at the next
        tick instead of a third of the lease later, if any lease is held."""
        if self.next_at:
            self.next_at = time.monotonic()

    def tick(self, now: float) -> None:
        if not self.next_at or now < self.next_at:
            return
        held = self.held.snapshot()
        if held:
            self._extend(held)
        self.next_at = now + self.lease_ms / 3000 if held else 0.0

    def _extend(self, held: list[Message]) -> None:
        """The heartbeat: extend the leases held, and learn which were cancelled meanwhile."""
        rows = statements.extend(
            ids=[m.id for m in held],
            tokens=[str(m.lease_token) for m in held],
            lease_ms=self.lease_ms,
            on=self.connection,
        )
        extended = {row.id for row in rows}
        cancelled = {row.id for row in rows if row.cancel_requested}
        for message in held:
            if message.id not in extended:
                logger.warning("lease on running message %s was lost; it may run twice", message.id)
        if cancelled:
            self.control.cancel([m for m in held if m.id in cancelled])

    def extend_for_handler(self, message: Message, duration: timedelta | float | None) -> None:
        """``message.extend_lease()``: on the handler thread's own Django connection."""
        lease_ms = to_ms(duration) if duration is not None else self.lease_ms
        rows = statements.extend(
            ids=[message.id], tokens=[str(message.lease_token)], lease_ms=lease_ms, on=self.using
        )
        extended = {row.id for row in rows}
        if any(row.cancel_requested for row in rows):
            message.cancel_requested = True  # the control thread interrupts it at its heartbeat
        if message.id not in extended:
            raise LeaseLost(
                f"lease on message {message.id} was lost; another worker may hold it", [message.id]
            )


class Reaper:
    """Gives expired leases back to their queue, every ``LONNYMQ_REAP_INTERVAL``, and
    deletes workflows finished more than ``LONNYMQ_WORKFLOW_RETENTION`` ago (100 a time)."""

    def __init__(self, connection: ControlConnection, stats: Stats):
        self.connection = connection
        self.stats = stats
        self.interval = settings.ms("REAP_INTERVAL") / 1000
        self.next_at = 0.0

    def tick(self, now: float) -> None:
        if now < self.next_at:
            return
        self.next_at = now + self.interval
        reaped = statements.reap(
            limit=500,
            dedup_window_ms=settings.ms("DEDUP_WINDOW"),
            tolerance_ms=settings.ms("WAKE_TOLERANCE"),
            on=self.connection,
        )
        if reaped:
            self.stats.reaped += int(reaped)
            logger.info("recovered %d message(s) whose lease expired", reaped)
        retention = settings.WORKFLOW_RETENTION
        if retention is not None:
            pruned = statements.workflow_prune(older_than_ms=to_ms(retention), limit=100, on=self.connection)
            if pruned:
                logger.info("pruned %d finished workflow(s)", pruned)


def idle_prune_ms() -> int | None:
    """``LONNYMQ_CHANNEL_IDLE_PRUNE`` in ms; None when off, or invalid (check E280 says so)."""
    value = settings.CHANNEL_IDLE_PRUNE
    if value is None or isinstance(value, bool):
        return None
    try:
        ms = to_ms(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return ms if 0 < ms <= to_ms(MAX_INTERVAL) else None


class Pruner:
    """Deletes idle, empty channels nobody configured, :data:`BATCH` per SQL call
    (``lonnymq_prune_channels_v1``), when ``LONNYMQ_CHANNEL_IDLE_PRUNE`` is not None.

    A tenth of the idle period apart (1 s to :data:`EVERY`), and at the next maintenance step
    again while a batch comes back full, so a backlog of idle channels drains batch by batch
    without one long statement. Each worker prunes any queue's channels: batches of several
    workers skip the rows the others hold.
    """

    # Channels one call deletes at most: one short statement of row locks and deletes, and
    # as many advisory locks from the server's shared lock table (6,400 slots by default,
    # shared by every session), held for that statement.
    BATCH = 200
    # The longest wait between two calls.
    EVERY = 60.0

    def __init__(self, connection: ControlConnection, stats: Stats, observers: Observers):
        self.connection = connection
        self.stats = stats
        self.observers = observers
        self.next_at = 0.0

    def tick(self, now: float) -> None:
        if now < self.next_at:
            return
        idle_ms = idle_prune_ms()
        if idle_ms is None:
            return
        self.next_at = now + min(max(idle_ms / 10_000, 1.0), self.EVERY)
        rows = self.connection.quietly(
            "prune idle channels",
            lambda: statements.prune_channels(idle_ms=idle_ms, limit=self.BATCH, on=self.connection),
        )
        pruned = int(rows[0][0] or 0) if rows else 0
        if pruned:
            self.stats.pruned += pruned
            self.observers.channels_pruned(pruned)
        if pruned >= self.BATCH:
            self.next_at = now  # more may be waiting: the next step prunes again


class Vacuum:
    """Vacuums the channel table (and the wake-up marks) once their dead row versions pass
    ``LONNYMQ_VACUUM_THRESHOLD`` plus a fifth of their live rows; looks once a second.

    Every release rewrites its channel's row, and the channel's turn is in the pick index,
    so none of those updates is HOT: a drain over 1,000 channels leaves about one dead row
    version per message, and the next dequeues walk their index entries (docs/performance.md,
    "A busy channel after many"). Autovacuum comes too late for that (it wakes once a minute
    by default, and may be off). The check reads the statistics counters only; the VACUUM
    runs on the control connection (autocommit: VACUUM cannot run in a transaction) with
    SKIP_LOCKED, so two workers never queue for it. A role that may not vacuum the tables
    (it does not own them) is never asked to.

    A held horizon (docs/performance.md, "A held snapshot"): while something holds the xmin
    horizon back, a VACUUM removes none of the versions since, and the table stays due.
    Repeating it every second read every dead version to remove none (37 times a cycle in
    ``bench.horizon``), so a VACUUM that leaves its table due marks the horizon it ran under
    as held: while that horizon stays, the tables wait, ``BACKOFF`` seconds doubling to
    ``BACKOFF_MAX`` (a role that cannot see other roles' sessions reads no horizon, and only
    the back-off brings it back). When the horizon moves on, every due table is vacuumed at
    once, and the message table too (otherwise left to autovacuum) once a horizon that stood
    ``HELD_LONG`` seconds moves on: the dead versions the held snapshot kept are all
    removable then, and the first cycle after it runs at the free rate whether autovacuum
    comes or not.
    """

    INTERVAL = 1.0
    # The message table is vacuumed once a horizon that stood this long (s) moves on: not
    # after a producer's transaction of a few seconds (a bulk enqueue), whose VACUUM would
    # only hold up this worker's fetches (it runs on the control connection).
    HELD_LONG = 10.0
    BACKOFF = 2.0
    BACKOFF_MAX = 8.0
    STATEMENTS = {
        "lonnymq_channel": statements.vacuum_channel,
        "lonnymq_wake": statements.vacuum_wake,
        "lonnymq_message": statements.vacuum_message,
    }

    def __init__(self, connection: ControlConnection):
        self.connection = connection
        self.next_at = 0.0
        self.vacuums = 0  # VACUUMs this worker ran
        self.skipped = 0  # looks that found a table due and left it: the horizon still held
        self.held: bool = False  # a VACUUM left its table due: the horizon was held
        self.held_horizon: str | None = None  # the horizon it ran under
        self.horizon: str | None = None  # the horizon of the last look
        self.horizon_since = 0.0  # since when it stands
        self.retry_at = 0.0
        self.backoff = self.BACKOFF

    def _due(self, threshold: int) -> tuple[list[str], str | None]:
        rows = self.connection.quietly(
            "read the tables' dead row versions",
            lambda: statements.vacuum_due(threshold=threshold, on=self.connection),
        )
        return [row.table for row in rows if row.due], (rows[0].horizon if rows else None)

    def tick(self, now: float) -> None:
        threshold = settings.VACUUM_THRESHOLD
        if threshold is None or now < self.next_at:
            return
        self.next_at = now + self.INTERVAL
        due, horizon = self._due(threshold)
        moved = self.held and horizon != self.held_horizon
        # A horizon that stood HELD_LONG moved on: what it kept in the message table is
        # removable now (whether or not the channel table was ever due meanwhile: one busy
        # channel leaves few dead channel versions and many dead messages).
        passed = False
        if horizon != self.horizon:
            passed = self.horizon is not None and now - self.horizon_since >= self.HELD_LONG
            self.horizon, self.horizon_since = horizon, now
        if not passed:
            # The message table is autovacuum's, but for the pass after a held horizon.
            due = [table for table in due if table != "lonnymq_message"]
        if not due:
            self.held = False
            return
        if self.held and not moved and not passed and now < self.retry_at:
            self.skipped += 1
            return
        vacuumed = []
        for table in due:
            started = time.monotonic()
            try:
                self.STATEMENTS[table](on=self.connection)
            except Exception as exc:
                if self.connection.is_lost(exc):
                    raise
                logger.warning("worker %s could not vacuum %s: %s", self.connection.name, table, exc)
                continue
            self.vacuums += 1
            vacuumed.append(table)
            logger.debug("vacuumed %s in %.0f ms", table, (time.monotonic() - started) * 1000)
        still, _ = self._due(threshold)
        if any(table in still for table in vacuumed):
            if self.held and not moved:
                self.backoff = min(self.backoff * 2, self.BACKOFF_MAX)
            else:
                self.backoff = self.BACKOFF
            self.held, self.held_horizon = True, horizon
            self.retry_at = now + self.backoff
        else:
            self.held = False


class Presence:
    """A worker's row in ``lonnymq_worker``: registered at the first beat, kept by later ones.

    One ``lonnymq_worker_beat_v1`` call every ``LONNYMQ_WORKER_HEARTBEAT``. A graceful
    shutdown calls :meth:`stopped`, so the row reads "stopped" at once; a worker killed or
    cut off stops beating and reads "lost" once silent for ``LONNYMQ_WORKER_LOST_AFTER``.
    A name a live worker holds gets a suffix (``name#2``): :attr:`name` is the one in use.
    """

    def __init__(
        self,
        connection: ControlConnection,
        *,
        name: str,
        queues: Sequence[str],
        concurrency: int,
        held: Held,
        stats: Stats,
        renamed: Callable[[str], None],
    ):
        self.connection = connection
        self.name = name
        self.queues = list(queues)
        self.concurrency = concurrency
        self.held = held
        self.stats = stats
        self.renamed = renamed
        self.instance = uuid.uuid4()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started_at: datetime = timezone.now()
        self.next_beat = 0.0
        self.beats = 0

    def _figures(self) -> dict[str, int]:
        return {
            # Handler calls, as threads count them: a batch of 50 is one, and messages a batch
            # handler is still collecting are none (the workers page says "full" by this).
            "in_flight": self.held.load(),
            "processed": self.stats.acked,
            "failed": self.stats.retried + self.stats.dead,
        }

    def tick(self, now: float) -> None:
        """Beat when due. A failed beat is logged and tried at the next one: it never stops the
        worker from serving its queues (a lost connection is raised, for the worker to reconnect)."""
        if now < self.next_beat:
            return
        self.next_beat = now + settings.ms("WORKER_HEARTBEAT") / 1000
        rows = self.connection.quietly(
            "write its heartbeat row",
            lambda: statements.worker_beat(
                name=self.name,
                instance=str(self.instance),
                host=self.host,
                pid=self.pid,
                queues=self.queues,
                concurrency=self.concurrency,
                started_at=self.started_at,
                lost_after_ms=settings.ms("WORKER_LOST_AFTER"),
                prune_after_ms=settings.ms("WORKER_PRUNE_AFTER"),
                **self._figures(),
                on=self.connection,
            ),
        )
        if not rows:
            return
        self.beats += 1
        name = rows[0][0]
        if name and name != self.name:
            logger.warning("worker name %s is held by a live worker; this worker is %s", self.name, name)
            self.name = name
            self.renamed(name)

    def stopped(self) -> None:
        """Mark the row stopped (graceful shutdown); a failure is only logged."""
        if not self.beats:
            return
        try:
            statements.worker_stop(
                name=self.name, instance=str(self.instance), **self._figures(), on=self.connection
            )
        except Exception as exc:
            logger.warning("worker %s could not mark its row stopped: %s", self.name, exc)


class Samples(Observer):
    """One worker's part in recording the dashboard's samples (see :mod:`django_lonnymq.sampling`)."""

    def __init__(self, connection: ControlConnection):
        self.connection = connection
        self.next_try = 0.0
        self.recorded = 0  # rows this worker recorded

    def tick(self) -> None:
        """Try when due. A failure is logged and tried again later: it never stops the worker
        (a lost connection is raised, for the worker to reconnect)."""
        every = interval_ms()
        now = time.monotonic()
        if every is None or now < self.next_try:
            return
        # A quarter of the interval: the samples' spacing stays within 1.25 intervals even
        # when the worker that recorded the last one stops.
        self.next_try = now + every / 4000
        rows = self.connection.quietly(
            "record the dashboard's samples",
            lambda: statements.record_samples_due(
                interval_ms=every, keep_ms=keep_ms(), cap=count_cap(), on=self.connection
            ),
        )
        if rows:
            self.recorded += int(rows[0][0] or 0)


class Housekeeping:
    """The maintenance step: each duty when due (see the module's docstring)."""

    def __init__(
        self,
        connection: ControlConnection,
        *,
        leases: Leases,
        reports: Reports,
        presence: Presence,
        observers: Observers,
        queues: Sequence[str],
        poll_interval: float,
        stats: Stats,
        enabled: bool,
    ):
        """``enabled=False`` (``testing.drain()``): no worker row, no periodic ticks, no
        dashboard samples, no VACUUM; leases are still kept and expired ones reaped."""
        self.connection = connection
        self.leases = leases
        self.reports = reports
        self.presence = presence
        self.observers = observers
        self.reaper = Reaper(connection, stats)
        self.pruner = Pruner(connection, stats, observers)
        self.vacuum = Vacuum(connection)
        self.enabled = enabled
        # The features' duties (the periodic schedules of these queues, ...), each on its own clock.
        self.duties = duties.build(queues, poll_interval, connection.using)

    def tick(self, stopping: bool) -> None:
        if self.enabled:
            self.presence.tick(time.monotonic())
            self.observers.tick()
        now = time.monotonic()
        self.leases.tick(now)
        self.reports.tick(now)
        self.reaper.tick(now)
        if self.enabled and not stopping:
            self.pruner.tick(now)
            self.vacuum.tick(now)
            for name, duty in self.duties:
                try:
                    duty.run(self.connection.conn)
                except Exception as exc:
                    if self.connection.is_lost(exc):
                        raise
                    logger.exception("worker duty %s failed; it runs again at the next step", name)

    def due_in(self, now: float) -> list[float]:
        """Seconds until the heartbeat, the reaper and the pruner are due (any may be negative)."""
        waits = [self.reaper.next_at - now]
        if self.enabled and idle_prune_ms() is not None:
            waits.append(self.pruner.next_at - now)
        if self.leases.next_at:
            waits.append(self.leases.next_at - now)
        if self.reports.next_at:
            waits.append(self.reports.next_at - now)
        return waits
