"""``manage.py lonnymq_stats``: every queue's figures as a table (or JSON); ``--record`` also
stores them as samples for the dashboard's history.

The rates (released per minute, net drain) look back ``RATE_WINDOW`` over the recorded
samples, this command's earlier rounds (``--interval``) and the figures now. STATE (``queue_paused``
in --json) says whether the whole queue is paused (``api.pause_queue``).

A queue past ``LONNYMQ_STATS_COUNT_CAP`` waiting messages (or dead letters) has its counts
estimated from a sample of the table: the table marks them with ``~`` (READY, SCHEDULED, DEPTH,
PAUSED, DEAD) and --json says ``"estimated": true``. IN FLIGHT, OLDEST READY, the channels and
RELEASED stay exact."""

from __future__ import annotations

import json
import signal
import threading
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from django_lonnymq import durable, workflows
from django_lonnymq.alarms import paused_queues
from django_lonnymq.figures import (
    RATE_WINDOW,
    format_age,
    format_rate,
    format_throughput,
    net_drain_per_minute,
    throughput,
)
from django_lonnymq.management.options import check_database, duration
from django_lonnymq.models import QueueSample
from django_lonnymq.routing import databases_of

COLUMNS = [
    ("queue", "QUEUE"),
    ("state", "STATE"),
    ("channels", "CHANNELS"),
    ("paused_channels", "PAUSED CH"),
    ("ready", "READY"),
    ("scheduled", "SCHEDULED"),
    ("depth", "DEPTH"),
    ("paused", "PAUSED"),
    ("in_flight", "IN FLIGHT"),
    ("dead", "DEAD"),
    ("released_total", "RELEASED"),
    ("oldest_ready", "OLDEST READY"),
    ("released_rate", "RELEASED/MIN"),
    ("net_drain", "NET DRAIN/MIN"),
]

# The columns an estimated queue's figures mark with "~" (the others stay exact).
ESTIMATED = ("ready", "scheduled", "depth", "paused", "dead")


class Command(BaseCommand):
    help = (
        "Print each queue's depth (ready + scheduled), in flight, dead, the oldest ready "
        "message's wait and the messages released ever; with history (--record, --interval), "
        "released per minute. --record stores a sample per queue for the admin dashboard (run "
        "it from cron, or with --interval)."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Figures of this command's earlier rounds that were not recorded (--interval without
        # --record), so the rates need no stored samples; only the last RATE_WINDOW is kept.
        self._earlier: dict[str, list[QueueSample]] = defaultdict(list)

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
        check_database(options["database"])
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
        # Every database that holds queues (LONNYMQ_QUEUE_DATABASES), or --database alone.
        aliases = databases_of(options["database"])
        # When the figures were taken (the samples' own time, which their rates are over),
        # not when this round ended: a slow first round would skew the rates read off it.
        self._taken_at: datetime | None = None
        rows = []
        for alias in aliases:
            for row in self._rows(options, alias):
                if len(aliases) > 1:
                    row["database"] = alias
                rows.append(row)
        flows: dict[str, int] = {}
        for alias in aliases:
            for state, n in workflows.counts(using=alias).items():
                flows[state] = flows.get(state, 0) + n
        # Durable handlers' suspended messages (docs/durable.md); they count as scheduled too.
        suspended: dict[str, int] = {}
        for alias in aliases:
            for queue, n in durable.suspended_counts(using=alias).items():
                if not options["queues"] or queue in options["queues"]:
                    suspended[queue] = suspended.get(queue, 0) + n
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "at": (self._taken_at or timezone.now()).isoformat(),
                        "queues": rows,
                        "workflows": flows,
                        "suspended": suspended,
                    }
                )
            )
        else:
            self.stdout.write(self._table(rows))
            if any(flows.values()):
                self.stdout.write("Workflows: " + ", ".join(f"{n:,} {state}" for state, n in flows.items()))
            if suspended:
                self.stdout.write(
                    "Suspended: " + ", ".join(f"{n:,} {queue}" for queue, n in sorted(suspended.items()))
                )

    def _rows(self, options: dict[str, Any], alias: str) -> list[dict[str, Any]]:
        wanted = options["queues"]
        if options["record"]:
            keep_ms = int(options["keep"].total_seconds() * 1000)
            samples = QueueSample.record(keep_ms=keep_ms, using=alias)
            if wanted:
                samples = [s for s in samples if s.queue in wanted]
        else:
            samples = QueueSample.live(wanted, using=alias)
        rates = self._rates(samples, alias)
        for sample in samples:
            self._taken_at = max(self._taken_at or sample.at, sample.at)
        paused = paused_queues(alias)
        return [
            self._row(sample, *rate, queue_paused=sample.queue in paused)
            for sample, rate in zip(samples, rates, strict=True)
        ]

    def _rates(self, samples: list[QueueSample], alias: str) -> list[tuple[float | None, float | None]]:
        """(released per minute, net drain per minute) of each sample over the last few minutes,
        from recorded samples, this command's earlier unrecorded rounds, and now."""
        since = timezone.now() - RATE_WINDOW
        earlier = self._earlier
        history: dict[str, list[QueueSample]] = defaultdict(list)
        recorded = QueueSample.objects.using(alias).filter(
            at__gte=since, queue__in=[s.queue for s in samples]
        )
        for sample in recorded.order_by("at"):
            history[sample.queue].append(sample)
        rates = []
        for sample in samples:
            points = [*history[sample.queue], *(p for p in earlier[sample.queue] if p.at >= since)]
            if sample.pk is None:  # live figures: the newest point, kept for the next rounds
                points.append(sample)
                earlier[sample.queue] = [p for p in earlier[sample.queue] if p.at >= since] + [sample]
            points.sort(key=lambda p: p.at)
            released = throughput(points, since)
            rates.append((released.per_minute if released else None, net_drain_per_minute(points, since)))
        return rates

    @staticmethod
    def _row(
        sample: QueueSample, released_rate: float | None, rate: float | None, *, queue_paused: bool = False
    ) -> dict[str, Any]:
        return {
            "queue": sample.queue,
            "queue_paused": queue_paused,
            "channels": sample.channels,
            "paused_channels": sample.paused_channels,
            "ready": sample.ready,
            "scheduled": sample.scheduled,
            "depth": sample.depth,
            "paused": sample.paused,
            "in_flight": sample.in_flight,
            "dead": sample.dead,
            "released_total": sample.released_total,
            "estimated": bool(sample.estimated),
            "oldest_ready_seconds": sample.oldest_ready_seconds,
            "released_per_minute": None if released_rate is None else round(released_rate, 3),
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
                "state": "paused" if row["queue_paused"] else "running",
                "oldest_ready": format_age(row["oldest_ready_seconds"]),
                "released_rate": format_throughput(row["released_per_minute"]),
                "net_drain": format_rate(row["net_drain_per_minute"]),
            }
            if row["estimated"]:
                for key in ESTIMATED:
                    shown[key] = "~" + shown[key]
            cells.append([shown[key] for key, _ in COLUMNS])
        widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
        lines = []
        for line in cells:
            parts = [
                text.ljust(width) if i < 2 else text.rjust(width)
                for i, (text, width) in enumerate(zip(line, widths, strict=True))
            ]
            lines.append("  ".join(parts).rstrip())
        return "\n".join(lines)
