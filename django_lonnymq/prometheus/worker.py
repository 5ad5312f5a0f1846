"""Per-worker Prometheus metrics, served by ``run_queue_worker --metrics-port``.

Each worker process has its own registry and its own HTTP port: one scrape target per worker
(``instance`` tells them apart, ``lonnymq_worker_info`` names the worker). Several workers on
one host take one port each (``--metrics-port 0`` picks a free one and prints it); no
shared-directory multiprocess mode is needed, because no two processes share a port.

Metrics (label ``queue``; ``outcome`` one of :data:`~django_lonnymq.worker.observer.OUTCOMES`):

- ``lonnymq_worker_messages_total{queue, outcome}``: outcomes as the database recorded them;
- ``lonnymq_worker_handler_duration_seconds{queue}``: a histogram of every handler run;
- ``lonnymq_worker_running_messages{queue}``: handlers running now;
- ``lonnymq_worker_leased_messages{queue}``: leases held now (running, or waiting for a
  free handler thread);
- ``lonnymq_worker_channels_pruned_total``: idle, empty channels this worker's housekeeping
  deleted (``LONNYMQ_CHANNEL_IDLE_PRUNE``);
- ``lonnymq_worker_info{worker, host, pid}`` (1) and ``lonnymq_worker_concurrency``.

The endpoint has no login: it listens on 127.0.0.1 unless told otherwise, drops a request not
sent within :data:`REQUEST_TIMEOUT` and serves at most :data:`MAX_CONNECTIONS` at once (more
are closed at once), so idle connections cannot take the worker's threads and file
descriptors (and with them its way back to the database after a restart).

prometheus-client is the ``metrics`` extra: imported only when metrics are served.
"""

from __future__ import annotations

import os
import socket
import socketserver
import threading
from collections.abc import Sequence
from typing import Any

from ..message import Message
from ..worker.held import Held
from ..worker.observer import OUTCOMES, Observer
from ..worker.outcomes import Outcome

# A connection whose request is not sent within this (each read) is closed.
REQUEST_TIMEOUT = 5.0
# Connections served at once; more are closed as they come.
MAX_CONNECTIONS = 100

# Handler durations from 5 ms to 10 min.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class WorkerMetrics(Observer):
    """One worker's metrics in a registry of its own, kept up to date as its observer."""

    def __init__(self, *, name: str, queues: Sequence[str], concurrency: int, held: Held):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.queues = list(queues)
        self.registry = CollectorRegistry(auto_describe=True)
        self.messages = Counter(
            "lonnymq_worker_messages",
            "Messages this worker finished, by queue and outcome (acked, retried, dead, timed_out, "
            "cancelled, lease_lost), as the database recorded them.",
            ["queue", "outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "lonnymq_worker_handler_duration_seconds",
            "How long each handler run took (every attempt), by queue.",
            ["queue"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.pruned = Counter(
            "lonnymq_worker_channels_pruned",
            "Idle, empty channels this worker's housekeeping deleted (LONNYMQ_CHANNEL_IDLE_PRUNE).",
            registry=self.registry,
        )
        self.running = Gauge(
            "lonnymq_worker_running_messages",
            "Handlers running now, by queue.",
            ["queue"],
            registry=self.registry,
        )
        info = Gauge(
            "lonnymq_worker_info",
            "This worker (always 1): its name as in the lonnymq_worker table, host and pid.",
            ["worker", "host", "pid"],
            registry=self.registry,
        )
        info.labels(name, socket.gethostname(), str(os.getpid())).set(1)
        Gauge("lonnymq_worker_concurrency", "Handler threads of this worker.", registry=self.registry).set(
            concurrency
        )
        self.registry.register(_LeasedCollector(self.queues, held))
        # Every series exists from the start, so rate() and increase() see the first event.
        for queue in self.queues:
            for outcome in OUTCOMES:
                self.messages.labels(queue, outcome)
            self.duration.labels(queue)
            self.running.labels(queue)
        self._server: Any = None

    def count(self, queue: str, outcome: str) -> None:
        self.messages.labels(queue, outcome).inc()

    # -- the worker's events -----------------------------------------------------------

    def handler_started(self, message: Message) -> None:
        self.running.labels(message.queue).inc()

    def handler_finished(self, message: Message, seconds: float, outcome: Outcome) -> None:
        self.running.labels(message.queue).dec()
        self.duration.labels(message.queue).observe(seconds)

    def acked(self, message: Message) -> None:
        self.count(message.queue, "acked")

    def retried(self, outcome: Outcome) -> None:
        self.count(outcome.message.queue, "retried")

    def snoozed(self, message: Message) -> None:
        self.count(message.queue, "snoozed")

    def dead(self, outcome: Outcome) -> None:
        self.count(outcome.message.queue, "dead")

    def timed_out(self, message: Message) -> None:
        self.count(message.queue, "timed_out")

    def cancelled(self, message: Message) -> None:
        self.count(message.queue, "cancelled")

    def lease_lost(self, message: Message) -> None:
        self.count(message.queue, "lease_lost")

    def channels_pruned(self, count: int) -> None:
        self.pruned.inc(count)

    def stopped(self) -> None:
        self.close()

    # -- the endpoint ------------------------------------------------------------------

    def serve(self, port: int, address: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``address:port`` (0: a free port) from a daemon thread; the port."""
        from prometheus_client.exposition import MetricsHandler

        class Handler(MetricsHandler.factory(self.registry)):  # type: ignore[misc]
            timeout = REQUEST_TIMEOUT

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a scrape is not news; a client that went away neither

        server = _BoundedServer((address, port), Handler, MAX_CONNECTIONS)
        threading.Thread(target=server.serve_forever, name="lonnymq-metrics", daemon=True).start()
        self._server = server
        return int(server.server_address[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _BoundedServer(socketserver.ThreadingTCPServer):
    """A thread per connection, at most ``limit`` at once: one past it is closed at once."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # the listen backlog (socketserver's default is 5)

    def __init__(self, address: tuple[str, int], handler: Any, limit: int):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._slots = threading.BoundedSemaphore(limit)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away (or sent nothing in time) is not the worker's error


class _LeasedCollector:
    """``lonnymq_worker_leased_messages``: read from the worker's leases at scrape time."""

    def __init__(self, queues: list[str], held: Held):
        from prometheus_client.core import GaugeMetricFamily  # now: a scrape may find no free fd

        self.queues = queues
        self.held = held
        self.family = GaugeMetricFamily

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Any:
        held = self.held.by_queue()
        family = self.family(
            "lonnymq_worker_leased_messages",
            "Messages this worker holds a lease on now (running, or waiting for a free handler thread).",
            labels=["queue"],
        )
        for queue in self.queues:
            family.add_metric([queue], held.get(queue, 0))
        yield family
