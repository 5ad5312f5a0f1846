"""The alarms that ring by default: a queue holds ready messages that no live worker serves,
or its oldest ready message has waited too long, or something has held the database's xmin
horizon back too long (a session's snapshot, a prepared transaction, a replication slot:
VACUUM removes none of the queue's dead rows meanwhile). ``lonnymq_health`` fails on them and the
dashboard shows them (docs/admin.md, "Alarms"); ``/metrics`` exports the figures behind them
(``lonnymq_live_workers``, ``lonnymq_oldest_ready_age_seconds``) for a Prometheus rule.

A paused channel's messages are paused, not ready: they never ring either alarm; nor does
the backlog of a paused queue (``api.pause_queue``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from . import statements
from .bounds import MAX_INTERVAL
from .conf import DEFAULTS, lost_after, settings, to_ms
from .figures import format_age
from .models import QueueConfig, QueueSample

UNSERVED = "unserved"
READY_AGE = "ready_age"
HORIZON = "horizon"
# The holders of the horizon the health command and the dashboard list (the oldest first).
HORIZON_HOLDERS = 5
# The health command counts a queue's ready (and paused) messages exactly up to this many:
# judging needs only "any?" and the oldest one's age, and a count of millions would cost
# seconds (health_figures).
HEALTH_COUNT_CAP = 10_000


@dataclass(frozen=True)
class Alarm:
    queue: str  # "" for a database-wide alarm (HORIZON)
    kind: str  # UNSERVED, READY_AGE or HORIZON
    text: str


@dataclass(frozen=True)
class HorizonHolder:
    """Something that holds the database's xmin horizon back (named statement
    ``horizon_holders``): a session, a WAL sender, a prepared transaction, a slot."""

    kind: str  # "session", "wal sender", "prepared transaction", "replication slot"
    pid: int | None
    user: str | None
    application_name: str | None
    state: str | None  # a session's state; "prepared"; a slot's "active" / "inactive"
    xact_start: datetime | None  # a prepared transaction: when it was prepared
    query_start: datetime | None
    age_seconds: float | None  # None: no time is known (a WAL sender, a slot)
    xid_age: int | None  # transactions since the horizon it holds
    query: str | None  # the first 200 characters of the session's last statement
    name: str | None  # a slot's name, a prepared transaction's gid

    def describe(self) -> str:
        """Who it is, in the words an operator needs to find it."""
        if self.kind == "replication slot":
            return f"replication slot {self.name} ({self.state}{f', pid {self.pid}' if self.pid else ''})"
        if self.kind == "prepared transaction":
            return f"prepared transaction {self.name!r} (owner {self.user})"
        parts = [f"user {self.user}" if self.user else "", f"application {self.application_name!r}"
                 if self.application_name else "", self.state or ""]  # fmt: skip
        if self.query_start is not None:
            parts.append(f"statement started {self.query_start:%Y-%m-%d %H:%M:%S %Z}".strip())
        if self.query:
            short = " ".join(self.query.split())
            parts.append(f"statement: {short[:80]}{'...' if len(short) > 80 else ''}")
        detail = ", ".join(part for part in parts if part)
        return f"{'WAL sender' if self.kind == 'wal sender' else 'session'} pid {self.pid} ({detail})"

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["description"] = self.describe()
        for key in ("xact_start", "query_start"):
            found[key] = None if found[key] is None else found[key].isoformat()
        return found


def live_workers(using: str | None = None) -> dict[str, int]:
    """Live workers per queue they serve, from the workers' rows (docs/admin.md, Workers)."""
    rows = statements.live_workers(lost_after_s=lost_after().total_seconds(), on=using)
    return {queue: int(n) for queue, n in rows}


def max_ready_age() -> float | None:
    """``LONNYMQ_HEALTH_MAX_READY_AGE`` in seconds (None: not judged); the default when the
    setting is malformed (check lonnymq.E220 reports it)."""
    value = settings.HEALTH_MAX_READY_AGE
    if value is None:
        return None
    try:
        ms = to_ms(value)
    except (TypeError, ValueError, OverflowError):
        ms = -1
    if not 0 < ms <= to_ms(MAX_INTERVAL):
        return float(to_ms(DEFAULTS["HEALTH_MAX_READY_AGE"])) / 1000
    return ms / 1000


def require_workers() -> bool:
    """``LONNYMQ_HEALTH_REQUIRE_WORKERS``: ready messages need a live worker of their queue."""
    value = settings.HEALTH_REQUIRE_WORKERS
    return value if isinstance(value, bool) else True


def alarms(
    samples: Iterable[QueueSample],
    live: dict[str, int],
    *,
    max_age: float | None,
    workers_required: bool,
    paused: Collection[str] = (),
) -> list[Alarm]:
    """The alarms of each queue's live figures (``QueueSample.live()``) and live workers;
    the queues in ``paused`` (:func:`paused_queues`) ring none."""
    found: list[Alarm] = []
    for sample in samples:
        if sample.ready <= 0 or sample.queue in paused:
            continue  # nothing a worker could take now (a paused channel's are not ready)
        if workers_required and not live.get(sample.queue):
            found.append(
                Alarm(
                    sample.queue,
                    UNSERVED,
                    f"queue {sample.queue}: {count_text(sample.ready, sample)} ready message(s) and no live "
                    "worker serves "
                    f"it (start `run_queue_worker --queue {sample.queue}`)",
                )
            )
        age = sample.oldest_ready_seconds
        if max_age is not None and age is not None and age > max_age:
            found.append(
                Alarm(
                    sample.queue,
                    READY_AGE,
                    f"queue {sample.queue}: a ready message has been due for {format_age(age)} ({age:.0f}s, "
                    f"more than {max_age:g}s); are enough workers serving it?",
                )
            )
    return found


def count_text(count: int, sample: QueueSample) -> str:
    """``count`` as a figure, "more than N" when it was counted only up to N
    (:func:`health_figures` sets ``counted_up_to``), "about N" when it was estimated
    (:meth:`QueueSample.live` past ``LONNYMQ_STATS_COUNT_CAP``)."""
    cap = getattr(sample, "counted_up_to", None)
    if sample.estimated:
        return f"about {count:,}"
    return f"more than {cap:,}" if cap is not None and count > cap else f"{count:,}"


def health_figures(using: str | None = None, *, cap: int = HEALTH_COUNT_CAP) -> list[QueueSample]:
    """The figures the health command judges, of each queue that has channels, as unsaved
    samples, in work that does not grow with the backlog (named statement ``queue_health``):
    ``ready`` and ``paused`` exact up to ``cap`` (beyond it cap + 1, and ``counted_up_to`` says
    so), ``oldest_ready_ms`` exact (one probe per channel). The other counts are left 0:
    :meth:`QueueSample.live` counts everything (exactly up to ``LONNYMQ_STATS_COUNT_CAP``), for the
    dashboard and the stats."""
    alias = using or settings.DATABASE
    found = []
    for queue, ready, paused, head, now_ms in statements.queue_health(cap=cap, on=alias):
        sample = QueueSample(
            queue=queue, channels=0, paused_channels=0, ready=ready, scheduled=0, in_flight=0, dead=0,
            oldest_ready_ms=None if head is None or head > now_ms else now_ms - head, paused=paused,
        )  # fmt: skip
        sample.counted_up_to = cap  # type: ignore[attr-defined]
        found.append(sample)
    return found


def paused_queues(using: str | None = None) -> set[str]:
    """The queues paused now (``api.pause_queue``)."""
    alias = using or settings.DATABASE
    return set(QueueConfig.objects.using(alias).filter(paused=True).values_list("queue", flat=True))


def horizon_alarm() -> float | None:
    """``LONNYMQ_HORIZON_ALARM`` in seconds (None: not judged); the default when the setting
    is malformed (check lonnymq.E220 reports it)."""
    value = settings.HORIZON_ALARM
    if value is None:
        return None
    try:
        ms = -1 if isinstance(value, bool) else to_ms(value)
    except (TypeError, ValueError, OverflowError):
        ms = -1
    if not 0 < ms <= to_ms(MAX_INTERVAL):
        return float(to_ms(DEFAULTS["HORIZON_ALARM"])) / 1000
    return ms / 1000


def horizon_holders(using: str | None = None, *, limit: int = HORIZON_HOLDERS) -> list[HorizonHolder]:
    """What holds the xmin horizon of the queue's database back, the oldest horizon first."""
    alias = using or settings.DATABASE
    return [HorizonHolder(*row) for row in statements.horizon_holders(limit=limit, on=alias)]


def horizon_alarms(holders: Iterable[HorizonHolder], *, max_age: float | None) -> list[Alarm]:
    """An alarm for each holder older than ``max_age`` seconds (None: none), and for each
    inactive replication slot that holds an xmin (nothing will ever move it on)."""
    found: list[Alarm] = []
    for holder in holders:
        if holder.kind == "replication slot" and holder.state == "inactive":
            found.append(
                Alarm(
                    "",
                    HORIZON,
                    f"{holder.describe()} holds the xmin horizon {holder.xid_age:,} transactions back and "
                    "nothing uses it: VACUUM removes none of the queue's dead rows meanwhile (drop the slot "
                    "if its standby is gone)",
                )
            )
        elif max_age is not None and holder.age_seconds is not None and holder.age_seconds > max_age:
            age = holder.age_seconds
            found.append(
                Alarm(
                    "",
                    HORIZON,
                    f"{holder.describe()} has held the xmin horizon back for {format_age(age)} (open for "
                    f"{int(age)}s, more than {max_age:g}s): VACUUM removes none of the queue's dead rows "
                    "meanwhile and every dequeue reads more of them; end it"
                    + (f" (pg_terminate_backend({holder.pid}))" if holder.kind == "session" else "")
                    + " if it is stuck",
                )
            )
    return found


def current(using: str | None = None, samples: list[QueueSample] | None = None) -> list[Alarm]:
    """The alarms now, by the settings (the dashboard's)."""
    if samples is None:
        samples = QueueSample.live(using=using)
    found = alarms(
        samples,
        live_workers(using),
        max_age=max_ready_age(),
        workers_required=require_workers(),
        paused=paused_queues(using),
    )
    return found + horizon_alarms(horizon_holders(using), max_age=horizon_alarm())
