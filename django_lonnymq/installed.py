"""Is the app's schema installed? The migrations of ``django_lonnymq`` that a database lacks.

The system check ``lonnymq.W210`` and ``run_queue_worker`` ask before anything runs; at run
time a call to a missing table or function is mapped to
:class:`~django_lonnymq.exceptions.SchemaMissing` (exceptions.py), which says the same.
"""

from __future__ import annotations

from django.db import connections

from .exceptions import SchemaMissing

APP = "django_lonnymq"


def unapplied(alias: str) -> list[str]:
    """Names of this app's migrations not applied to the database ``alias``, in order."""
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(connections[alias])
    applied = loader.applied_migrations or {}
    return sorted(name for app, name in loader.graph.nodes if app == APP and (app, name) not in applied)


def require(alias: str) -> None:
    """Raise :class:`SchemaMissing` when the database lacks any of this app's migrations."""
    missing = unapplied(alias)
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise SchemaMissing(f"migrations not applied: {shown}", database=alias)
