"""``manage.py lonnymq_queue pause|resume|status <queue>...``: pause or resume whole queues.

A paused queue's workers stay up and take nothing from it; enqueues, publishes and schedule
ticks still write. ``status`` prints each named queue's state (all paused queues when none is
named). An invalid queue name is refused before anything is written.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import api, arguments
from ...exceptions import InvalidArgument
from ...models import QueueConfig


class Command(BaseCommand):
    help = "Pause or resume whole queues (workers take nothing from a paused queue), or show which are."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["pause", "resume", "status"])
        parser.add_argument("queues", nargs="*", metavar="queue")
        parser.add_argument(
            "--database",
            default=None,
            help="database alias (default: each queue's own, LONNYMQ_QUEUE_DATABASES or LONNYMQ_DATABASE)",
        )

    def handle(
        self, *args: Any, action: str, queues: list[str], database: str | None, **options: Any
    ) -> None:
        from ...routing import databases_of
        from ..options import check_database

        check_database(database)
        # Each queue on its own database (LONNYMQ_QUEUE_DATABASES) unless --database names one.
        if action == "status":
            paused = {
                queue
                for alias in databases_of(database)
                for queue in QueueConfig.objects.using(alias)
                .filter(paused=True)
                .values_list("queue", flat=True)
            }
            for queue in queues or sorted(paused):
                self.stdout.write(f"{queue}: {'paused' if queue in paused else 'running'}")
            return
        if not queues:
            raise CommandError(f"{action} needs at least one queue name")
        change = api.pause_queue if action == "pause" else api.resume_queue
        try:
            for queue in queues:  # every name checked before the first write
                arguments.queue(queue)
        except InvalidArgument as exc:
            raise CommandError(str(exc)) from exc
        for queue in queues:
            changed = change(queue, using=database)
            state = "paused" if action == "pause" else "running"
            self.stdout.write(f"{queue}: {state}" + ("" if changed else f" (was already {state})"))
