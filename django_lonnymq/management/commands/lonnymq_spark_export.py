"""``manage.py lonnymq_spark_export``: read a data set with Spark and enqueue one message per row.

The executors get a libpq DSN built from the Django database settings; they import no Django.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections
from psycopg import conninfo

from django_lonnymq.conf import settings
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.management.options import check_database
from django_lonnymq.routing import queue_database

# Django OPTIONS that are libpq connection parameters (the rest are Django's or psycopg's own).
LIBPQ_OPTIONS = {
    "application_name",
    "channel_binding",
    "connect_timeout",
    "gssencmode",
    "keepalives",
    "keepalives_count",
    "keepalives_idle",
    "keepalives_interval",
    "options",
    "passfile",
    "service",
    "sslcert",
    "sslcrl",
    "sslkey",
    "sslmode",
    "sslpassword",
    "sslrootcert",
    "target_session_attrs",
}


def dsn_from_settings(settings_dict: dict[str, Any]) -> str:
    """A libpq DSN for one entry of ``DATABASES``."""
    params = {
        "dbname": settings_dict.get("NAME"),
        "user": settings_dict.get("USER"),
        "password": settings_dict.get("PASSWORD"),
        "host": settings_dict.get("HOST"),
        "port": settings_dict.get("PORT"),
    }
    for key, value in (settings_dict.get("OPTIONS") or {}).items():
        if key in LIBPQ_OPTIONS:
            params[key] = value
    return conninfo.make_conninfo(**{k: str(v) for k, v in params.items() if v not in (None, "")})


class Command(BaseCommand):
    help = (
        "Enqueue one message per row of a Parquet, CSV or JSON data set, with Spark. "
        "Safe to re-run: each row's dedup key makes a repeat enqueue nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        from django_lonnymq.spark.cli import add_arguments

        add_arguments(parser)
        parser.add_argument(
            "--database",
            default=None,
            help="Database alias (default: the queue's, LONNYMQ_QUEUE_DATABASES or LONNYMQ_DATABASE).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from django_lonnymq.spark import ExportError
        from django_lonnymq.spark.cli import run

        check_database(options["database"])
        # The queue's database (LONNYMQ_QUEUE_DATABASES) unless --database names another.
        try:
            alias = queue_database(options["queue"], options["database"])
        except InvalidArgument as exc:
            raise CommandError(str(exc)) from exc
        dsn = dsn_from_settings(connections[alias].settings_dict)

        def write(line: str) -> None:
            self.stdout.write(line)
            self.stdout.flush()

        try:
            run(
                options,
                dsn,
                write,
                max_attempts=settings.MAX_ATTEMPTS,
                priority_step_ms=settings.ms("PRIORITY_STEP"),
                tolerance_ms=settings.ms("WAKE_TOLERANCE"),
                max_payload_bytes=settings.MAX_PAYLOAD_BYTES,
            )
        except ExportError as exc:
            raise CommandError(str(exc)) from exc
