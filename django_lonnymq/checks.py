"""System checks, ids ``lonnymq.E00x`` / ``lonnymq.E1x0``-``E3x0`` (``E250``: queue databases) / ``lonnymq.W210`` (one test each in tests/checks/test_checks.py)."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

from django.core.checks import Error, Tags, register
from django.core.checks import Warning as CheckWarning
from django.db import DatabaseError, connections

from .bounds import MAX_INTERVAL, MAX_LEASE
from .bounds import MAX_SNOOZES as MAX_SNOOZES_BOUND
from .conf import (
    CROSS_DATABASE_ENQUEUE_VALUES,
    DEFAULTS,
    DURATIONS,
    SYNCHRONOUS_COMMIT_VALUES,
    settings,
    to_ms,
)

# The longest each duration setting may be: beyond it a value would be refused by the SQL
# functions at every call, stopping what the worker does with it.
_LONGEST = {
    "LEASE": MAX_LEASE,
    "PRIORITY_STEP": MAX_LEASE,
    "WAKE_TOLERANCE": MAX_LEASE,
    "INTERRUPT_GRACE": MAX_LEASE,
    "CANCEL_GRACE": MAX_LEASE,
}


# Not tagged "database": it reads settings only, and Django 6 runs database-tagged checks
# only when `check --database` names an alias.
@register(Tags.compatibility)
def check_database(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E001: the queue's alias must exist and be PostgreSQL."""
    alias = settings.DATABASE
    if alias not in connections.settings:
        return [
            Error(
                f"LONNYMQ_DATABASE names the database alias {alias!r}, which is not in DATABASES.",
                hint=f"Use one of: {', '.join(sorted(connections.settings))}.",
                id="lonnymq.E001",
            )
        ]
    vendor = connections[alias].vendor
    if vendor != "postgresql":
        return [
            Error(
                f"django-lonnymq needs PostgreSQL, but database alias {alias!r} is {vendor}.",
                hint="Point LONNYMQ_DATABASE at a PostgreSQL alias (django.db.backends.postgresql).",
                id="lonnymq.E001",
            )
        ]
    return []


def _duration_ms(value: Any) -> int:
    """A duration setting in milliseconds, or -1 when it is not a duration (a bool, a string,
    a number too large): every range check below then fails and names the value."""
    if isinstance(value, bool):
        return -1
    try:
        return to_ms(value)
    except (TypeError, ValueError, OverflowError):
        return -1


@register(Tags.compatibility)
def check_queue_databases(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E250: LONNYMQ_QUEUE_DATABASES maps queue names to PostgreSQL aliases of DATABASES."""
    from .routing import mapping_problems

    return [
        Error(
            f"LONNYMQ_QUEUE_DATABASES {problem}.",
            hint='Map queue names to aliases of DATABASES, e.g. {"reports": "analytics"} (docs/scaling.md).',
            id="lonnymq.E250",
        )
        for problem in mapping_problems(settings.QUEUE_DATABASES)
    ]


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E002: durations positive and bounded; E003: MAX_ATTEMPTS in 1..1000; E004: payload limit."""
    errors: list[Error] = []
    for name in sorted(DURATIONS):
        value = getattr(settings, name)
        try:
            ms = to_ms(value)
        except (TypeError, ValueError, OverflowError):
            ms = -1
        longest = _LONGEST.get(name, MAX_INTERVAL)
        if ms <= 0 or ms > to_ms(longest):
            errors.append(
                Error(
                    f"LONNYMQ_{name} must be a positive duration of at most {longest}, got {value!r}.",
                    hint=f"Use a timedelta or seconds; the default is {DEFAULTS[name]!r}.",
                    id="lonnymq.E002",
                )
            )
    attempts = settings.MAX_ATTEMPTS
    if not isinstance(attempts, int) or isinstance(attempts, bool) or not 1 <= attempts <= 1000:
        errors.append(
            Error(
                f"LONNYMQ_MAX_ATTEMPTS must be an integer from 1 to 1000, got {attempts!r}.",
                id="lonnymq.E003",
            )
        )
    limit = settings.MAX_PAYLOAD_BYTES
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 8 * 1024 * 1024:
        errors.append(
            Error(
                f"LONNYMQ_MAX_PAYLOAD_BYTES must be an integer from 1 to 8388608, got {limit!r}.",
                id="lonnymq.E004",
            )
        )
    return errors


@register(Tags.compatibility)
def check_handler_modules(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E006: every module in LONNYMQ_HANDLER_MODULES can be found (a worker imports them)."""
    from importlib.util import find_spec

    errors: list[Error] = []
    modules = settings.HANDLER_MODULES
    if isinstance(modules, str) or not isinstance(modules, (list, tuple)):
        return [
            Error(
                f"LONNYMQ_HANDLER_MODULES must be a list of module names, got {modules!r}.", id="lonnymq.E006"
            )
        ]
    for name in modules:
        try:
            found = isinstance(name, str) and find_spec(name) is not None
        except (ImportError, ValueError):  # a missing parent package
            found = False
        if not found:
            errors.append(
                Error(
                    f"LONNYMQ_HANDLER_MODULES names {name!r}, which cannot be imported.",
                    hint="Give the dotted path of a module that registers handlers with @handler.",
                    id="lonnymq.E006",
                )
            )
    return errors


@register(Tags.compatibility)
def check_worker_heartbeat(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E200: a worker counts as lost only after several heartbeats of silence (at least two)."""
    try:
        beat, lost = settings.ms("WORKER_HEARTBEAT"), settings.ms("WORKER_LOST_AFTER")
    except (TypeError, ValueError, OverflowError):
        return []  # E002 reports the malformed value
    if beat > 0 and lost < 2 * beat:
        return [
            Error(
                f"LONNYMQ_WORKER_LOST_AFTER ({settings.WORKER_LOST_AFTER!r}) must be at least twice "
                f"LONNYMQ_WORKER_HEARTBEAT ({settings.WORKER_HEARTBEAT!r}): a live worker would show "
                "as lost between two heartbeats, and another worker could take its name.",
                hint="Keep the defaults (5 s and 30 s) or raise WORKER_LOST_AFTER.",
                id="lonnymq.E200",
            )
        ]
    return []


@register(Tags.database)
def check_schema_installed(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckWarning]:
    """W210: each database that holds queues (``LONNYMQ_DATABASE`` and every alias of
    ``LONNYMQ_QUEUE_DATABASES``) has every migration of the app (its tables and functions).

    A warning, not an error: ``migrate`` runs the database checks before it migrates, and an
    error would stop the very command that fixes it. ``run_queue_worker`` refuses to start
    instead (django_lonnymq.installed.require).
    """
    from .exceptions import SchemaMissing
    from .installed import require
    from .routing import queue_databases

    if not databases:
        return []
    if _migrating():
        return []  # migrate is the fix, running: "run migrate" would only confuse
    if _configuration_errors():
        return []  # migrate stops on those errors: "run migrate" cannot succeed before they are fixed
    warnings: list[CheckWarning] = []
    for alias in queue_databases():
        if alias not in databases or alias not in connections.settings:
            continue
        if connections[alias].vendor != "postgresql":
            continue  # E001 / E250 say so
        try:
            require(alias)
        except SchemaMissing as exc:
            command = "migrate" if alias == "default" else f"migrate --database {alias}"
            warnings.append(
                CheckWarning(str(exc), hint=f"Run `python manage.py {command}`.", id="lonnymq.W210")
            )
        except DatabaseError:
            continue  # unreachable: the commands that need it say so when they connect
    return warnings


@register(Tags.compatibility)
def check_sampling(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E210: LONNYMQ_SAMPLE_INTERVAL is None or 1 s to 1 day; LONNYMQ_SAMPLE_KEEP 1 min to 366 days."""
    from .sampling import KEEP_LONGEST, KEEP_SHORTEST, LONGEST, SHORTEST

    errors: list[Error] = []
    for name, shortest, longest, optional in (
        ("SAMPLE_INTERVAL", SHORTEST, LONGEST, True),
        ("SAMPLE_KEEP", KEEP_SHORTEST, KEEP_LONGEST, False),
    ):
        value = getattr(settings, name)
        if value is None and optional:
            continue
        ms = _duration_ms(value)
        if not to_ms(shortest) <= ms <= to_ms(longest):
            errors.append(
                Error(
                    f"LONNYMQ_{name} must be {'None or ' if optional else ''}a duration from {shortest} "
                    f"to {longest}, got {value!r}.",
                    hint=f"Use a timedelta or seconds; the default is {DEFAULTS[name]!r}. Workers use "
                    "the nearest allowed value meanwhile.",
                    id="lonnymq.E210",
                )
            )
    return errors


@register(Tags.compatibility)
def check_stats_count_cap(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E300: LONNYMQ_STATS_COUNT_CAP is an integer from 1 to 1,000,000,000."""
    from .sampling import COUNT_CAP_LARGEST, COUNT_CAP_SMALLEST

    value = settings.STATS_COUNT_CAP
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and COUNT_CAP_SMALLEST <= value <= COUNT_CAP_LARGEST
    ):
        return []
    return [
        Error(
            f"LONNYMQ_STATS_COUNT_CAP must be an integer from {COUNT_CAP_SMALLEST} to {COUNT_CAP_LARGEST}, "
            f"got {value!r}.",
            hint="The default is 100000: a queue's figures are exact up to this many waiting messages "
            "and estimated past it. The figures use the nearest allowed value meanwhile.",
            id="lonnymq.E300",
        )
    ]


@register(Tags.compatibility)
def check_handler_timeout(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E170: LONNYMQ_HANDLER_TIMEOUT is None or a positive duration of at most 366 days."""
    value = settings.HANDLER_TIMEOUT
    if value is None:
        return []
    try:
        from .registry import handler_timeout_ms

        handler_timeout_ms("LONNYMQ_HANDLER_TIMEOUT", value)
    except ValueError as exc:
        return [
            Error(
                f"LONNYMQ_HANDLER_TIMEOUT must be None or a positive duration of at most 366 days: {exc}.",
                hint="Use a timedelta or seconds, e.g. timedelta(minutes=5); None means no timeout.",
                id="lonnymq.E170",
            )
        ]
    return []


@register(Tags.compatibility)
def check_health(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E220: LONNYMQ_HEALTH_MAX_READY_AGE and LONNYMQ_HORIZON_ALARM are None or a positive
    duration of at most 366 days; LONNYMQ_HEALTH_REQUIRE_WORKERS is a bool."""
    errors: list[Error] = []
    value = settings.HEALTH_MAX_READY_AGE
    if value is not None:
        ms = _duration_ms(value)
        if not 0 < ms <= to_ms(MAX_INTERVAL):
            errors.append(
                Error(
                    f"LONNYMQ_HEALTH_MAX_READY_AGE must be None or a positive duration of at most "
                    f"{MAX_INTERVAL}, got {value!r}.",
                    hint="Use a timedelta or seconds, e.g. timedelta(minutes=5) (the default); None: "
                    "the ready age is not judged. The default is used meanwhile.",
                    id="lonnymq.E220",
                )
            )
    horizon = settings.HORIZON_ALARM
    if horizon is not None:
        ms = _duration_ms(horizon)
        if not 0 < ms <= to_ms(MAX_INTERVAL):
            errors.append(
                Error(
                    f"LONNYMQ_HORIZON_ALARM must be None or a positive duration of at most "
                    f"{MAX_INTERVAL}, got {horizon!r}.",
                    hint="Use a timedelta or seconds, e.g. timedelta(minutes=5) (the default); None: "
                    "a held snapshot is not judged. The default is used meanwhile.",
                    id="lonnymq.E220",
                )
            )
    required = settings.HEALTH_REQUIRE_WORKERS
    if not isinstance(required, bool):
        errors.append(
            Error(
                f"LONNYMQ_HEALTH_REQUIRE_WORKERS must be True or False, got {required!r}.",
                hint="True (the default): ready messages without a live worker of their queue ring the alarm.",
                id="lonnymq.E220",
            )
        )
    return errors


@register(Tags.compatibility)
def check_max_snoozes(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E240: LONNYMQ_MAX_SNOOZES is an integer from 0 to 1000000."""
    value = settings.MAX_SNOOZES
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SNOOZES_BOUND:
        return []
    return [
        Error(
            f"LONNYMQ_MAX_SNOOZES must be an integer from 0 to {MAX_SNOOZES_BOUND}, got {value!r}.",
            hint="The default is 100; a snooze past it counts as a failed attempt.",
            id="lonnymq.E240",
        )
    ]


@register(Tags.compatibility)
def check_vacuum_threshold(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E270: LONNYMQ_VACUUM_THRESHOLD is None or an integer from 0 to 1,000,000,000."""
    value = settings.VACUUM_THRESHOLD
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10**9):
        return []
    return [
        Error(
            f"LONNYMQ_VACUUM_THRESHOLD must be None or an integer from 0 to 1000000000, got {value!r}.",
            hint="The default is 10000 dead row versions (plus a fifth of the live rows); None leaves "
            "the channel table to autovacuum.",
            id="lonnymq.E270",
        )
    ]


@register(Tags.compatibility)
def check_worker_synchronous_commit(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E230: LONNYMQ_WORKER_SYNCHRONOUS_COMMIT is one of PostgreSQL's synchronous_commit values."""
    value = settings.WORKER_SYNCHRONOUS_COMMIT
    if isinstance(value, str) and value in SYNCHRONOUS_COMMIT_VALUES:
        return []
    return [
        Error(
            f"LONNYMQ_WORKER_SYNCHRONOUS_COMMIT must be one of {', '.join(SYNCHRONOUS_COMMIT_VALUES)}, "
            f"got {value!r}.",
            hint='"on" (the default): leases and acks survive a server crash once committed; "off": '
            "faster commits, and a crash may run the last few hundred ms of messages again. "
            'Workers use "on" meanwhile.',
            id="lonnymq.E230",
        )
    ]


@register(Tags.compatibility)
def check_cross_database_enqueue(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E310: LONNYMQ_CROSS_DATABASE_ENQUEUE is "warn", "raise" or "allow"."""
    value = settings.CROSS_DATABASE_ENQUEUE
    if isinstance(value, str) and value in CROSS_DATABASE_ENQUEUE_VALUES:
        return []
    return [
        Error(
            f"LONNYMQ_CROSS_DATABASE_ENQUEUE must be one of {', '.join(CROSS_DATABASE_ENQUEUE_VALUES)}, "
            f"got {value!r}.",
            hint='"warn" (the default): a write to a queue on another database than the open transaction\'s '
            'warns and commits at once; "raise": it is refused; "allow": it commits at once, silently. '
            'Enqueues treat an unknown value as "raise" meanwhile.',
            id="lonnymq.E310",
        )
    ]


@register(Tags.compatibility)
def check_channel_idle_prune(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E280: LONNYMQ_CHANNEL_IDLE_PRUNE is None or a positive duration of at most 366 days."""
    value = settings.CHANNEL_IDLE_PRUNE
    if value is None:
        return []
    ms = _duration_ms(value)
    if 0 < ms <= to_ms(MAX_INTERVAL):
        return []
    return [
        Error(
            f"LONNYMQ_CHANNEL_IDLE_PRUNE must be None or a positive duration of at most {MAX_INTERVAL}, "
            f"got {value!r}.",
            hint="Use a timedelta or seconds, e.g. timedelta(days=1) (the default); None: workers "
            "never delete idle channels. Workers prune nothing meanwhile.",
            id="lonnymq.E280",
        )
    ]


def _migrating() -> bool:
    """Whether these checks run inside ``manage.py migrate`` (which checks before migrating)."""
    from django.core.management.commands.migrate import Command as Migrate

    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if isinstance(frame.f_locals.get("self"), Migrate):
            return True
        frame = frame.f_back
    return False


def _configuration_errors() -> bool:
    """Whether the app's own checks (settings, and its Django Tasks backends: E005, E190...)
    report an error: ``migrate`` runs the checks first and stops on any error."""
    own = (check_database, check_queue_databases, check_settings, check_handler_modules, check_worker_heartbeat,
           check_sampling, check_handler_timeout, check_health, check_channel_idle_prune,
           check_workflow_retention, check_cross_database_enqueue)  # fmt: skip
    if any(check() for check in own):
        return True
    try:
        from .tasks import _backend_checks, lonnymq_backends

        return any(_backend_checks(backend) for backend in lonnymq_backends())
    except Exception:  # no Django Tasks here, or a backend that cannot even be built
        return False


@register(Tags.compatibility)
def check_workflow_retention(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E290: LONNYMQ_WORKFLOW_RETENTION is None or a duration of at most 366 days."""
    value = settings.WORKFLOW_RETENTION
    if value is None:
        return []
    ms = _duration_ms(value)
    if 0 <= ms <= to_ms(MAX_INTERVAL):
        return []
    return [
        Error(
            f"LONNYMQ_WORKFLOW_RETENTION must be None or a duration from 0 to 366 days, got {value!r}.",
            hint="Use a timedelta or seconds; the default is 7 days (None: finished workflows are kept).",
            id="lonnymq.E290",
        )
    ]
