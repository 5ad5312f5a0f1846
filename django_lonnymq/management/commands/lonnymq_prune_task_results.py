"""``manage.py lonnymq_prune_task_results``: delete finished Django Task results older than an age.

The flags are those of django-tasks-db's ``prune_db_task_results``, so a cron line moves over
by changing the command's name. Rows go in batches, each its own short transaction.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q
from django.utils import timezone

_MAX_DAYS = 36_500


def days(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of days") from None
    if not 0 <= value <= _MAX_DAYS:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and {_MAX_DAYS} days")
    return value


def batch(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 100_000:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 1 and 100000")
    return value


class Command(BaseCommand):
    help = "Delete finished (SUCCESSFUL or FAILED) Django Task results older than an age."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default", help="Task backend alias (default 'default').")
        parser.add_argument(
            "--queue-name",
            default="*",
            help="Queues whose results to prune, comma-separated; '*' for all (default).",
        )
        parser.add_argument(
            "--min-age-days",
            type=days,
            default=14,
            help="Prune results finished at least this many days ago (default 14).",
        )
        parser.add_argument(
            "--failed-min-age-days",
            type=days,
            default=None,
            help="The age for FAILED results, when it should differ (default: --min-age-days).",
        )
        parser.add_argument("--batch-size", type=batch, default=1000, help="Rows per delete (default 1000).")
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from django_lonnymq.models import TaskResultRecord

        backend = _lonnymq_backend(options["backend"])
        now = timezone.now()
        succeeded_before = now - timedelta(days=options["min_age_days"])
        failed_days = options["failed_min_age_days"]
        failed_before = now - timedelta(days=failed_days) if failed_days is not None else succeeded_before
        queues = [q.strip() for q in options["queue_name"].split(",") if q.strip()]
        if not queues:
            raise CommandError("--queue-name must name a queue or '*'")
        # Results live with their task queue's database (LONNYMQ_QUEUE_DATABASES): each is pruned.
        found = []
        for database in backend.databases():
            results = TaskResultRecord.objects.using(database).filter(
                Q(status="SUCCESSFUL", finished_at__lte=succeeded_before)
                | Q(status="FAILED", finished_at__lte=failed_before),
                backend=backend.alias,
            )
            if "*" not in queues:
                results = results.filter(queue__in=queues)
            found.append((database, results))
        if options["dry_run"]:
            self.stdout.write(f"Would delete {sum(results.count() for _, results in found)} task result(s)")
            return
        deleted = 0
        for database, results in found:
            while True:
                ids = list(results.order_by().values_list("id", flat=True)[: options["batch_size"]])
                if not ids:
                    break
                count, _ = TaskResultRecord.objects.using(database).filter(id__in=ids).delete()
                deleted += count
        self.stdout.write(f"Deleted {deleted} task result(s)")


def _lonnymq_backend(alias: str) -> Any:
    try:
        from django_lonnymq.tasks import InvalidTaskBackend, LonnyMQBackend, task_backends
    except ImportError as exc:  # neither django.tasks nor the django-tasks backport
        raise CommandError(f"Django Tasks is not installed: {exc}") from exc
    try:
        backend = task_backends[alias]
    except InvalidTaskBackend as exc:
        raise CommandError(f"--backend {alias!r}: {exc}") from exc
    if not isinstance(backend, LonnyMQBackend):
        raise CommandError(f"--backend {alias!r} is not a LonnyMQBackend ({type(backend).__name__})")
    return backend
