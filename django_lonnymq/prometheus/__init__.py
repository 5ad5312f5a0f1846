"""The Prometheus view: every queue's gauges and release counter, from what the database
holds (one scrape from any web process answers for every queue). Needs the ``metrics`` extra
(prometheus-client). Route it in your URLs (docs/admin.md, "Prometheus metrics").

Every metric of the package lives in this package: the queue gauges here, and each worker's own
metrics in :mod:`.worker` (attached by ``run_queue_worker --metrics-port``; the worker package
never imports them).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.http import HttpRequest, HttpResponse

from .. import workflows
from ..alarms import live_workers, paused_queues
from ..models import QueueSample
from ..routing import databases_of


class QueueCollector:
    """A prometheus-client collector of every queue's live figures (one SQL call per scrape and
    database that holds queues)."""

    GAUGES = [
        ("lonnymq_ready_messages", "Messages ready to be released now (paused channels apart).", "ready"),
        (
            "lonnymq_scheduled_messages",
            "Messages waiting for a future run time or a retry backoff.",
            "scheduled",
        ),
        (
            "lonnymq_paused_messages",
            "Messages waiting in paused channels (not ready, not scheduled).",
            "paused",
        ),
        ("lonnymq_in_flight_messages", "Messages leased by a worker.", "in_flight"),
        ("lonnymq_dead_messages", "Messages in the dead-letter table.", "dead"),
        ("lonnymq_channels", "Channels (tenants) of the queue.", "channels"),
        ("lonnymq_paused_channels", "Paused channels of the queue.", "paused_channels"),
    ]

    def __init__(self, using: str | None = None):
        """``using``: one database; None: every database that holds queues (one call each)."""
        self.using = using

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        aliases = databases_of(self.using)
        samples = [sample for alias in aliases for sample in QueueSample.live(using=alias)]
        live: Counter[str] = Counter()
        paused: set[str] = set()
        for alias in aliases:
            live.update(live_workers(alias))
            paused |= paused_queues(alias)
        for name, documentation, attr in self.GAUGES:
            gauge = GaugeMetricFamily(name, documentation, labels=["queue"])
            for sample in samples:
                gauge.add_metric([sample.queue], getattr(sample, attr))
            yield gauge
        age = GaugeMetricFamily(
            "lonnymq_oldest_ready_age_seconds",
            "How long the most overdue ready message has been due (0 when none is ready; paused "
            "channels do not count).",
            labels=["queue"],
        )
        for sample in samples:
            age.add_metric([sample.queue], sample.oldest_ready_seconds or 0.0)
        yield age
        estimated = GaugeMetricFamily(
            "lonnymq_stats_estimated",
            "1 when the queue's message and dead-letter gauges are estimates: it holds more than "
            "LONNYMQ_STATS_COUNT_CAP waiting messages (or dead letters), counted from a sample of the "
            "table; 0 when they are exact.",
            labels=["queue"],
        )
        for sample in samples:
            estimated.add_metric([sample.queue], 1 if sample.estimated else 0)
        yield estimated
        workers = GaugeMetricFamily(
            "lonnymq_live_workers",
            "Live workers serving the queue (not stopped, heard from within LONNYMQ_WORKER_LOST_AFTER).",
            labels=["queue"],
        )
        for queue in sorted({sample.queue for sample in samples} | set(live)):
            workers.add_metric([queue], live.get(queue, 0))
        yield workers
        queue_paused = GaugeMetricFamily(
            "lonnymq_queue_paused",
            "1 while the whole queue is paused (api.pause_queue): workers take nothing from it.",
            labels=["queue"],
        )
        for queue in sorted({sample.queue for sample in samples} | paused):
            queue_paused.add_metric([queue], 1 if queue in paused else 0)
        yield queue_paused
        # Exposed as lonnymq_released_total. The sum falls when a channel is deleted by hand
        # (pruned channels keep their count), which Prometheus reads as a counter reset
        # (see docs/admin.md).
        released = CounterMetricFamily(
            "lonnymq_released_total",
            "Messages released (leased) to workers, ever: once per delivery, so a retried "
            "message counts once per attempt.",
            labels=["queue"],
        )
        for sample in samples:
            released.add_metric([sample.queue], sample.released_total)
        yield released
        flows = GaugeMetricFamily(
            "lonnymq_workflows",
            "Workflows by state (running, succeeded, failed, cancelled).",
            labels=["state"],
        )
        for state, n in workflows.counts(using=self.using).items():
            flows.add_metric([state], n)
        yield flows


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition of every queue's gauges and release counter. Needs the ``metrics`` extra
    (prometheus-client); protect the URL as you protect your other metrics endpoints."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    except ImportError:
        return HttpResponse(
            "prometheus-client is not installed: pip install 'django-lonnymq[metrics]'\n",
            status=501,
            content_type="text/plain; charset=utf-8",
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
