"""System checks, ids ``lonnymq.E00x`` / ``lonnymq.W00x`` (one test each in tests/unit/test_checks.py)."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, register
from django.db import connections

from .conf import DEFAULTS, DURATIONS, settings, to_ms


@register(Tags.database, Tags.compatibility, deploy=False)
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


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """E002: durations must be positive; E003: MAX_ATTEMPTS in 1..1000; E004: payload limit."""
    errors: list[Error] = []
    for name in sorted(DURATIONS):
        value = getattr(settings, name)
        try:
            ms = to_ms(value)
        except (TypeError, ValueError):
            ms = -1
        if ms <= 0:
            errors.append(
                Error(
                    f"LONNYMQ_{name} must be a positive duration, got {value!r}.",
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
