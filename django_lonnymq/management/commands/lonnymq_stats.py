"""``manage.py lonnymq_stats``: every queue's figures as a table (or JSON); ``--record`` also
stores them as samples for the dashboard's history."""

from __future__ import annotations

import json
import signal
import threading
from collections import defaultdict
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from django_lonnymq.conf import settings
from django_lonnymq.management.commands.run_queue_worker import duration
from django_lonnymq.models import QueueSample
from django_lonnymq.views import RATE_WINDOW, format_age, format_rate, net_drain_per_minute

COLUMNS = [
    ("queue", "QUEUE"),
    ("channels", "CHANNELS"),
    ("paused_channels", "PAUSED"),
    ("ready", "READY"),
    ("scheduled", "SCHEDULED"),
    ("depth", "DEPTH"),
    ("in_flight", "IN FLIGHT"),
    ("dead", "DEAD"),
    ("oldest_ready", "OLDEST READY"),
    ("net_drain", "NET DRAIN/MIN"),
]


class Command(BaseCommand):
    help = (
        "Print each queue's depth (ready + scheduled), in flight, dead and the oldest ready "
        "message's wait. --record stores a sample per queue for the admin dashboard (run it "
        "from cron, or with --interval)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            "-q",
            action="append",
            dest="queues",
            default=None,
            help="Only this queue (repeat for several; default all).",
        )
        parser.add_argument(
            "--json", action="store_true", help="JSON instead of a table (one document per round)."
        )
        parser.add_argument(
            "--record",
            action="store_true",
            help="Store a sample of every queue (the dashboard's history), then print.",
        )
        parser.add_argument(
            "--interval",
            type=duration,
            default=None,
            help="Repeat every DURATION (e.g. 15s) until SIGINT/SIGTERM.",
        )
        parser.add_argument(
            "--keep",
            type=duration,
            default=timedelta(hours=24),
            help="With --record: drop samples older than this (default 24h).",
        )
        parser.add_argument("--database", default=None, help="Database alias (default LONNYMQ_DATABASE).")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["keep"] < timedelta(minutes=1):
            raise CommandError("--keep must be at least 1m")
        interval: timedelta | None = options["interval"]
        if interval is None:
            self._round(options)
            return
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not stop.is_set():
                self._round(options)
                stop.wait(interval.total_seconds())
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _round(self, options: dict[str, Any]) -> None:
        alias = options["database"] or settings.DATABASE
        wanted = options["queues"]
        if options["record"]:
            keep_ms = int(options["keep"].total_seconds() * 1000)
            samples = QueueSample.record(keep_ms=keep_ms, using=alias)
            if wanted:
                samples = [s for s in samples if s.queue in wanted]
        else:
            samples = QueueSample.live(wanted, using=alias)
        rates = self._rates(samples, alias)
        rows = [self._row(sample, rate) for sample, rate in zip(samples, rates, strict=True)]
        if options["json"]:
            self.stdout.write(json.dumps({"at": timezone.now().isoformat(), "queues": rows}))
        else:
            self.stdout.write(self._table(rows))

    @staticmethod
    def _rates(samples: list[QueueSample], alias: str) -> list[float | None]:
        """Net drain per minute over the last few minutes, from recorded samples plus now."""
        since = timezone.now() - RATE_WINDOW
        history: dict[str, list[QueueSample]] = defaultdict(list)
        recorded = QueueSample.objects.using(alias).filter(
            at__gte=since, queue__in=[s.queue for s in samples]
        )
        for sample in recorded.order_by("at"):
            history[sample.queue].append(sample)
        rates = []
        for sample in samples:
            points = history[sample.queue]
            if sample.pk is None:  # live figures: the newest point
                points = [*points, sample]
            rates.append(net_drain_per_minute(points, since))
        return rates

    @staticmethod
    def _row(sample: QueueSample, rate: float | None) -> dict[str, Any]:
        return {
            "queue": sample.queue,
            "channels": sample.channels,
            "paused_channels": sample.paused_channels,
            "ready": sample.ready,
            "scheduled": sample.scheduled,
            "depth": sample.depth,
            "in_flight": sample.in_flight,
            "dead": sample.dead,
            "oldest_ready_seconds": sample.oldest_ready_seconds,
            "net_drain_per_minute": None if rate is None else round(rate, 3),
        }

    @staticmethod
    def _table(rows: list[dict[str, Any]]) -> str:
        if not rows:
            return "No queues yet (nothing enqueued, no channel configured)."
        cells = [[title for _, title in COLUMNS]]
        for row in rows:
            shown = {
                **{key: f"{value:,}" if isinstance(value, int) else str(value) for key, value in row.items()},
                "oldest_ready": format_age(row["oldest_ready_seconds"]),
                "net_drain": format_rate(row["net_drain_per_minute"]),
            }
            cells.append([shown[key] for key, _ in COLUMNS])
        widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
        lines = []
        for line in cells:
            parts = [
                text.ljust(width) if i == 0 else text.rjust(width)
                for i, (text, width) in enumerate(zip(line, widths, strict=True))
            ]
            lines.append("  ".join(parts).rstrip())
        return "\n".join(lines)
