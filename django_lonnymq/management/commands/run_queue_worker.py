"""``manage.py run_queue_worker``: parse flags, build a :class:`~django_lonnymq.worker.Worker`, run it."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections

from django_lonnymq import installed, logs
from django_lonnymq.bounds import MAX_BATCH, MAX_LEASE, MIN_LEASE
from django_lonnymq.conf import settings
from django_lonnymq.exceptions import InvalidArgument, NoHandler, SchemaMissing
from django_lonnymq.management.options import check_database, duration, port_number, positive_int
from django_lonnymq.registry import autodiscover
from django_lonnymq.routing import by_database, databases_of
from django_lonnymq.topics import sync_declared_subscriptions
from django_lonnymq.worker import Worker, WorkerGroup


def by_database_of(queues: list[str], database: str | None) -> dict[str, list[str]]:
    """The queues grouped by their database alias (all on ``--database`` when given)."""
    try:
        return by_database(queues, database)
    except InvalidArgument as exc:
        raise CommandError(str(exc)) from exc


ALL_TASK_QUEUES = "*"


def with_task_queues(queues: list[str], database: str | None) -> list[str]:
    """``queues`` with ``*`` replaced by every task queue (a CommandError when there is none)."""
    from django_lonnymq.models import Channel
    from django_lonnymq.tasks import all_task_queues

    try:
        existing = sorted(
            {
                queue
                for alias in databases_of(database)
                for queue in Channel.objects.using(alias).values_list("queue", flat=True).distinct()
            }
        )
        expanded = all_task_queues(existing)
    except (ImproperlyConfigured, ImportError) as exc:  # no Django Tasks in this project
        raise CommandError(f"--queue '*' names the task queues of Django Tasks: {exc}") from exc
    if not expanded:
        raise CommandError("--queue '*' names the task queues, but no LonnyMQBackend is configured in TASKS")
    found: list[str] = []
    for name in queues:
        for queue_name in expanded if name == ALL_TASK_QUEUES else [name]:
            if queue_name not in found:
                found.append(queue_name)
    return found


def unlikely_queues(queues: list[str], database: str | None) -> list[str]:
    """A warning per queue that only a Tasks backend accepting any queue name
    (``"QUEUES": []``) serves, that is not ``default`` and that no message ever reached (no
    channel in the database): most likely a misspelled ``--queue``."""
    from difflib import get_close_matches

    from django_lonnymq.models import Channel
    from django_lonnymq.registry import get_handler, registered_queues

    try:
        from django_lonnymq.tasks import DEFAULT_TASK_QUEUE_NAME, run_task_message, task_queues
    except ImportError:  # no Django Tasks (Django 5.2 without the tasks extra): no task queue
        return []

    named = set(task_queues()) | {DEFAULT_TASK_QUEUE_NAME}
    suspects = [q for q in queues if q not in named and get_handler(q) is run_task_message]
    if not suspects:
        return []
    alias = database or settings.DATABASE
    existing = set(Channel.objects.using(alias).filter(queue__in=suspects).values_list("queue", flat=True))
    known = sorted(
        named
        | set(registered_queues())
        | set(Channel.objects.using(alias).values_list("queue", flat=True).distinct()[:1000])
    )
    warnings = []
    for queue in suspects:
        if queue in existing:
            continue
        close = get_close_matches(queue, [k for k in known if k != queue], n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        warnings.append(
            f"warning: queue {queue!r} has no handler of its own and no message has ever been enqueued "
            "to it: it is served only because a Django Tasks backend accepts any queue name "
            f'("QUEUES": []). Is the name misspelled?{hint}'
        )
    return warnings


class Command(BaseCommand):
    help = (
        "Run a queue worker. SIGTERM/SIGINT stop fetching, let running handlers finish, exit 0; "
        "a second one exits at once (status 1)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            "-q",
            action="append",
            required=True,
            dest="queues",
            help="Queue to serve (repeat for several). '*' stands for every task queue of the "
            "Django Tasks backend (docs/tasks.md).",
        )
        parser.add_argument(
            "--concurrency",
            "-c",
            type=positive_int,
            default=1,
            help="Handlers running at once: threads for def handlers, tasks for async def ones (default 1).",
        )
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            default=None,
            help="Most messages leased per fetch (default: the concurrency; at most 10000).",
        )
        parser.add_argument(
            "--lease",
            type=duration,
            default=None,
            help="Lease per message, e.g. 30s (default LONNYMQ_LEASE). Extended while it runs.",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit once the queues hold nothing ready and nothing in flight.",
        )
        parser.add_argument(
            "--max-messages",
            type=positive_int,
            default=None,
            help="Exit after starting this many messages (and finishing them).",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=duration,
            default=None,
            help="How long running handlers may finish after SIGTERM (default LONNYMQ_SHUTDOWN_TIMEOUT).",
        )
        parser.add_argument(
            "--database",
            default=None,
            help="Database alias of every queue served (default: each queue's own, LONNYMQ_QUEUE_DATABASES "
            "or LONNYMQ_DATABASE; queues on several databases get one connection each).",
        )
        parser.add_argument(
            "--metrics-port",
            type=port_number,
            default=None,
            help="Serve this worker's Prometheus metrics on this port (0: a free one, printed); needs "
            "prometheus-client (the metrics extra). One port per worker process.",
        )
        parser.add_argument(
            "--metrics-host",
            "--metrics-address",
            dest="metrics_address",
            default="127.0.0.1",
            help="Address the metrics port listens on (default 127.0.0.1, this host only). The "
            "endpoint has no login: 0.0.0.0 serves every interface, so firewall the port.",
        )
        parser.add_argument(
            "--name",
            default=None,
            help="The worker's name in the admin and in messages' leased_by (default host:pid; "
            "a name a live worker holds gets a #2, #3... suffix).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch_size"] is not None and options["batch_size"] > MAX_BATCH:
            raise CommandError(f"--batch-size must be at most {MAX_BATCH}")
        if options["lease"] is not None and not MIN_LEASE <= options["lease"] <= MAX_LEASE:
            raise CommandError("--lease must be between 1s and 24h")
        check_database(options["database"])
        logs.configure_console()
        self._require(options["database"] or settings.DATABASE)
        autodiscover()
        queues = options["queues"]
        if ALL_TASK_QUEUES in queues:
            queues = with_task_queues(queues, options["database"])
        # Each queue's database (LONNYMQ_QUEUE_DATABASES) unless --database names one for all.
        by_database = by_database_of(queues, options["database"])
        for alias in by_database:
            if alias != (options["database"] or settings.DATABASE):
                self._require(alias)
        sync_declared_subscriptions(self, options["database"])
        worker_options = {
            "concurrency": options["concurrency"],
            "batch_size": options["batch_size"],
            "lease": options["lease"],
            "burst": options["burst"],
            "max_messages": options["max_messages"],
            "shutdown_timeout": options["shutdown_timeout"],
            "name": options["name"],
        }
        worker: Worker | WorkerGroup
        try:
            if len(by_database) == 1:
                [(alias, queues)] = by_database.items()
                worker = Worker(queues, using=alias, **worker_options)
            else:  # one connection, LISTEN and set of handler threads per database
                worker = WorkerGroup(by_database, **worker_options)
        except (NoHandler, InvalidArgument) as exc:
            raise CommandError(str(exc)) from exc
        for alias, served in by_database.items():
            for warning in unlikely_queues(served, alias):
                self.stderr.write(warning)
        metrics_url = self._serve_metrics(worker, options["metrics_port"], options["metrics_address"])
        worker.install_signal_handlers()
        worker.announces = False  # these lines say it: the log does not repeat them
        self.stdout.write(
            f"lonnymq worker {worker.name}: queues={','.join(worker.queues)} "
            f"concurrency={worker.concurrency} batch={worker.batch_size} lease={worker.lease_ms / 1000:g}s"
            + (
                " databases=" + ";".join(f"{a}:{','.join(q)}" for a, q in by_database.items())
                if len(by_database) > 1
                else ""
            )
        )
        if metrics_url:
            self.stdout.write(f"lonnymq worker {worker.name}: metrics on {metrics_url}")
        self.stdout.flush()
        stats = worker.run()  # its metrics endpoint, if any, closes when it stops
        self.stdout.write(f"lonnymq worker {worker.name} stopped: {stats.summary()}")
        if worker.exit_code:
            # It stopped because it could not go on (docs/failure-model.md): a supervisor
            # restarts it; its leases come back to the queue.
            self.stdout.flush()
            raise SystemExit(worker.exit_code)

    @staticmethod
    def _require(alias: str) -> None:
        """Refuse to start on a database that lacks a migration of the app."""
        try:
            installed.require(alias)
        except SchemaMissing as exc:
            raise CommandError(str(exc)) from exc
        except DatabaseError:
            pass  # unreachable now: the worker retries its connection, and says so
        finally:
            connections[alias].close()

    @staticmethod
    def _serve_metrics(worker: Worker | WorkerGroup, port: int | None, address: str) -> str | None:
        """Start the worker's metrics endpoint; its URL (None without --metrics-port)."""
        if port is None:
            return None
        try:
            from django_lonnymq.prometheus.worker import WorkerMetrics

            metrics = WorkerMetrics(
                name=worker.name,
                queues=worker.queues,
                # Handler threads in the process: a group has the concurrency on each database.
                concurrency=worker.concurrency * len(getattr(worker, "workers", [worker])),
                held=worker.held,  # type: ignore[arg-type]
            )
        except ImportError as exc:
            raise CommandError(
                "--metrics-port needs prometheus-client: pip install 'django-lonnymq[metrics]'"
            ) from exc
        try:
            bound = metrics.serve(port, address)
        except OSError as exc:
            raise CommandError(f"--metrics-port {port} on {address}: {exc.strerror or exc}") from exc
        worker.observers.add(metrics)
        shown = f"[{address}]" if ":" in address else address
        return f"http://{shown}:{bound}/metrics"
