"""The backend's system checks (``lonnymq.E190``-``E195``, ``E005``) and the OPTIONS it reads."""

from __future__ import annotations

from typing import Any

from django.db import connections

from .. import arguments
from ..exceptions import (
    LonnyMQError,
)

# The OPTIONS the backend reads; any other key is reported by check() (a typo would be ignored).
OPTION_NAMES = ("CHANNEL_KWARG", "DEFAULT_CHANNEL", "DATABASE", "MAX_ATTEMPTS", "TASK_MODULES")


def _backend_checks(backend: Any) -> list[Any]:  # a LonnyMQBackend (no import: it calls this)
    from django.apps import apps
    from django.core.checks import Error

    errors: list[Any] = []
    where = f"task backend {backend.alias!r}"
    if not apps.is_installed("django_lonnymq"):
        errors.append(
            Error(
                f"{where} is a LonnyMQBackend, but django_lonnymq is not in INSTALLED_APPS.",
                hint="Add 'django_lonnymq' to INSTALLED_APPS and run migrate: it owns the queue's "
                "tables and functions and the task result table.",
                id="lonnymq.E190",
            )
        )
    if backend.database not in connections.settings or connections[backend.database].vendor != "postgresql":
        errors.append(
            Error(
                f"{where} needs a PostgreSQL database alias, got {backend.database!r}",
                hint="Set OPTIONS['DATABASE'] (or LONNYMQ_DATABASE) to a PostgreSQL alias in DATABASES.",
                id="lonnymq.E005",
            )
        )
    unknown = sorted(set(backend.options) - set(OPTION_NAMES))
    if unknown:
        errors.append(
            Error(
                f"{where} has OPTIONS it does not know: {', '.join(map(repr, unknown))}.",
                hint=f"The options are: {', '.join(OPTION_NAMES)}.",
                id="lonnymq.E191",
            )
        )
    attempts = backend.max_attempts
    if attempts is not None and (
        isinstance(attempts, bool) or not isinstance(attempts, int) or not 1 <= attempts <= 1000
    ):
        errors.append(
            Error(
                f"{where}: OPTIONS['MAX_ATTEMPTS'] must be an integer from 1 to 1000, got {attempts!r}.",
                hint="Use 1 for the reference backend's behaviour (no retries).",
                id="lonnymq.E192",
            )
        )
    for option, value, length in (
        ("DEFAULT_CHANNEL", backend.default_channel, 200),
        ("CHANNEL_KWARG", backend.channel_kwarg, 200),
    ):
        if option == "CHANNEL_KWARG" and value is None:
            continue
        try:
            arguments.name(option, value, length)
        except LonnyMQError as exc:
            errors.append(Error(f"{where}: OPTIONS['{option}']: {exc}.", id="lonnymq.E193"))
    modules = backend.options.get("TASK_MODULES", [])
    if isinstance(modules, str) or not isinstance(modules, (list, tuple)):
        errors.append(
            Error(
                f"{where}: OPTIONS['TASK_MODULES'] must be a list of module names, got {modules!r}.",
                id="lonnymq.E194",
            )
        )
    else:
        from importlib.util import find_spec

        for name in modules:
            try:
                found = isinstance(name, str) and find_spec(name) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                errors.append(
                    Error(
                        f"{where}: OPTIONS['TASK_MODULES'] names {name!r}, which cannot be imported.",
                        id="lonnymq.E194",
                    )
                )
    for queue_name in sorted(backend.queues, key=str):
        try:
            arguments.queue(queue_name, "QUEUES")
        except LonnyMQError as exc:
            errors.append(
                Error(f"{where}: {exc}.", hint="Queue names are 1 to 100 characters.", id="lonnymq.E195")
            )
    return errors
