"""``LONNYMQ_*`` settings, read lazily and cached until a ``setting_changed`` signal (which
``override_settings`` sends), so the enqueue path does not pay a settings lookup per value.
Defaults live here only.

Durations accept a ``timedelta`` or a number of seconds.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed

from .durations import to_ms

PREFIX = "LONNYMQ_"

DEFAULTS: dict[str, Any] = {
    # Database alias the worker and the default ``using=`` run on.
    "DATABASE": "default",
    # Queues that live on another database alias: {"reports": "analytics"} (django_lonnymq.routing).
    "QUEUE_DATABASES": {},
    # A write to a queue on one database (enqueue, enqueue_many, a workflow's start) while a
    # transaction is open on another and none on the queue's commits at once, whatever becomes
    # of the open one: "warn" (a CrossDatabaseWarning, then write), "raise" (CrossDatabaseTransaction,
    # nothing written) or "allow" (write, say nothing). docs/scaling.md.
    "CROSS_DATABASE_ENQUEUE": "warn",
    # Deliveries before a failing message goes to the dead-letter table.
    "MAX_ATTEMPTS": 5,
    # A priority of p acts as "enqueued p steps earlier".
    "PRIORITY_STEP": timedelta(seconds=1),
    # How long a worker holds a message before another may take it over.
    "LEASE": timedelta(seconds=30),
    # Snoozes (raise Snooze) a message may take; a snooze past it is a failed attempt
    # ("snoozed more than N times": retried with backoff, dead when attempts are used up).
    "MAX_SNOOZES": 100,
    # Retry backoff: base * 2 ** (attempt - 1), equal jitter, capped.
    "RETRY_BACKOFF_BASE": timedelta(seconds=1),
    "RETRY_BACKOFF_MAX": timedelta(hours=1),
    # Largest payload accepted, as serialized JSON bytes.
    "MAX_PAYLOAD_BYTES": 1_000_000,
    # Idle workers look again at least this often (LISTEN/NOTIFY usually wakes them sooner).
    "POLL_INTERVAL": timedelta(seconds=1),
    # How often a worker recovers expired leases of any worker.
    "REAP_INTERVAL": timedelta(seconds=5),
    # Workers VACUUM the channel table (and the wake-up marks) once its dead row versions
    # pass this many plus a fifth of its live rows (checked once a second, from the
    # statistics counters); None: never (leave it to autovacuum).
    "VACUUM_THRESHOLD": 10_000,
    # The worker's own statements (dequeue, ack, extend, reap) run with this statement_timeout,
    # set on its connection, so a role's low default cannot starve it; 0 turns it off.
    "WORKER_STATEMENT_TIMEOUT": timedelta(seconds=30),
    # synchronous_commit of the worker's own connection (leases, acks, retries). "on": a
    # lease or ack survives a server crash once committed; "off": a crash may undo the last
    # few hundred ms of them (those messages run again), for a faster commit.
    "WORKER_SYNCHRONOUS_COMMIT": "on",
    # On SIGTERM, how long running handlers may take before the worker exits anyway.
    "SHUTDOWN_TIMEOUT": timedelta(seconds=30),
    # Default handler timeout (``@handler(timeout=...)`` overrides it); None: no timeout.
    "HANDLER_TIMEOUT": None,
    # How long an interrupted handler (timed out, cancelled) may take to stop before its worker
    # abandons it: stops extending its lease, stops fetching and exits with status 1.
    "INTERRUPT_GRACE": timedelta(seconds=10),
    # How long a cancelled running handler sees ``message.cancel_requested`` before it is
    # interrupted.
    "CANCEL_GRACE": timedelta(seconds=1),
    # Tests: run each message's handler in-process when its enqueue commits (django_lonnymq.eager).
    "EAGER": False,
    # An empty channel nobody configured (no limits, weight, rate, pause or plan), idle (no release,
    # not created) for longer than this, is deleted by the workers' housekeeping; the next
    # enqueue into it creates it again. None: channels are kept until delete_channel.
    "CHANNEL_IDLE_PRUNE": timedelta(days=1),
    # How long an event (api.emit_event) is kept for a wait that comes after it; later emits
    # of its key change nothing meanwhile (first write wins). docs/durable.md.
    "EVENT_RETENTION": timedelta(days=7),
    # message.progress(): a worker writes each message's latest report at most this often
    # (and once more when its run ends); reports in between only replace the one waiting.
    "PROGRESS_INTERVAL": timedelta(milliseconds=500),
    # How long a message's last progress report is kept after the message left the queue
    # (acked, or its dead letter purged), for api.message_status and the admin.
    "PROGRESS_RETENTION": timedelta(days=7),
    # How long a dedup key keeps refusing duplicates after its message was enqueued.
    "DEDUP_WINDOW": timedelta(days=1),
    # An enqueue wakes a channel (leaves a wake-up mark) only when its next turn is later
    # than needed by more than this; a larger value means fewer marks, a later wake-up.
    "WAKE_TOLERANCE": timedelta(milliseconds=50),
    # Workers you can see (django_lonnymq.workers): each worker writes its lonnymq_worker row
    # this often; a row silent for longer than LOST_AFTER (several heartbeats) shows as lost;
    # rows lost or stopped for longer than PRUNE_AFTER are deleted by any worker's heartbeat.
    "WORKER_HEARTBEAT": timedelta(seconds=5),
    "WORKER_LOST_AFTER": timedelta(seconds=30),
    "WORKER_PRUNE_AFTER": timedelta(days=1),
    # Workers record the dashboard's samples (one per queue) this often, one worker at a time;
    # None: they record none (then run `lonnymq_stats --record` yourself). 1 s to 1 day.
    "SAMPLE_INTERVAL": timedelta(minutes=1),
    # Samples older than this are dropped when a sample is recorded. 1 min to 366 days.
    "SAMPLE_KEEP": timedelta(hours=24),
    # The operators' figures (lonnymq_stats, /metrics, the dashboard, the samples) count a
    # queue's waiting messages, and its dead letters, exactly up to this many; past it they
    # are estimated from a sample of the table (flagged "estimated"), so their cost does not
    # grow with the backlog. An integer from 1 to 1,000,000,000.
    "STATS_COUNT_CAP": 100_000,
    # OpenTelemetry spans around enqueue and handler runs, when opentelemetry is installed
    # (the otel extra) and a tracer provider records them; False: never (django_lonnymq.tracing).
    "TRACING": True,
    # The worker's console log lines (when the project's LOGGING gives django_lonnymq no
    # handler): a logging format string, and the dotted path of the logging.Formatter class
    # that formats them (given the format as its first argument). docs/admin.md, "Logs".
    "LOG_FORMAT": "%(asctime)s %(levelname)s %(name)s: %(message)s",
    "LOG_FORMATTER": "django_lonnymq.logs.Formatter",
    # lonnymq_health and the dashboard's alarms (docs/admin.md, "Alarms"): a queue's oldest
    # ready message may have been due this long (None: not judged), and ready messages need a
    # live worker serving their queue. The command's flags override both.
    "HEALTH_MAX_READY_AGE": timedelta(minutes=5),
    "HEALTH_REQUIRE_WORKERS": True,
    # lonnymq_health and the dashboard warn when a session, a prepared transaction or a
    # replication slot has held this database's xmin horizon back longer than this (None: not
    # judged): meanwhile VACUUM removes none of the queue's dead rows (docs/admin.md, "Alarms").
    "HORIZON_ALARM": timedelta(minutes=5),
    # Finished workflows (succeeded, cancelled, or failed with their dead steps purged) are
    # deleted with their steps and outputs this long after they finished, by the workers'
    # housekeeping (django_lonnymq.workflows.prune); None: never.
    "WORKFLOW_RETENTION": timedelta(days=7),
    # Extra modules the worker imports to register handlers (besides each app's handlers.py).
    "HANDLER_MODULES": [],
}

# The values LONNYMQ_CROSS_DATABASE_ENQUEUE may take.
CROSS_DATABASE_ENQUEUE_VALUES = ("warn", "raise", "allow")

# The values of PostgreSQL's synchronous_commit LONNYMQ_WORKER_SYNCHRONOUS_COMMIT may take.
SYNCHRONOUS_COMMIT_VALUES = ("on", "off", "local", "remote_write", "remote_apply")

DURATIONS = {
    "PRIORITY_STEP",
    "LEASE",
    "RETRY_BACKOFF_BASE",
    "RETRY_BACKOFF_MAX",
    "POLL_INTERVAL",
    "REAP_INTERVAL",
    "SHUTDOWN_TIMEOUT",
    "INTERRUPT_GRACE",
    "CANCEL_GRACE",
    "DEDUP_WINDOW",
    "WAKE_TOLERANCE",
    "WORKER_HEARTBEAT",
    "WORKER_LOST_AFTER",
    "WORKER_PRUNE_AFTER",
    "EVENT_RETENTION",
    "PROGRESS_INTERVAL",
    "PROGRESS_RETENTION",
}


class Settings:
    """Attribute access to ``LONNYMQ_<NAME>``, falling back to :data:`DEFAULTS`."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        try:
            return self._cache[name]
        except KeyError:
            pass
        if name not in DEFAULTS:
            raise AttributeError(f"unknown setting {PREFIX}{name}")
        value = self._cache[name] = getattr(django_settings, PREFIX + name, DEFAULTS[name])
        return value

    def ms(self, name: str) -> int:
        """A duration setting in milliseconds."""
        return to_ms(getattr(self, name))

    def clear_cache(self) -> None:
        self._cache.clear()


settings = Settings()


def _forget_changed_setting(*, setting: str, **_: Any) -> None:
    if setting.startswith(PREFIX):
        settings.clear_cache()


setting_changed.connect(_forget_changed_setting, dispatch_uid="django_lonnymq.conf")


def lost_after() -> timedelta:
    """How long a worker may be silent before it shows as lost (``LONNYMQ_WORKER_LOST_AFTER``)."""
    return timedelta(milliseconds=settings.ms("WORKER_LOST_AFTER"))


def enqueue_params() -> dict[str, int]:
    """The settings every enqueue passes to its SQL function (enqueue, publish, tasks, ticks)."""
    return {
        "priority_step_ms": settings.ms("PRIORITY_STEP"),
        "tolerance_ms": settings.ms("WAKE_TOLERANCE"),
    }
