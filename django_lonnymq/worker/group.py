"""One worker process serving queues on several databases (``LONNYMQ_QUEUE_DATABASES``).

A :class:`WorkerGroup` runs one :class:`~.loop.Worker` per database alias, each on a thread of
its own with its own control connection, LISTEN, handler threads, leases, worker row and
housekeeping. A lease, an ack and a wake-up belong to one database, so nothing is shared but
the process: the single-database worker is the very same code, unchanged, and a process whose
queues all live on one database runs a plain :class:`~.loop.Worker` (the command decides).

``concurrency`` and ``batch_size`` apply to each database's part; the worker's name is the same
on every database (each has its own ``lonnymq_worker`` table). ``max_messages`` is refused: a
quota shared across the parts would couple their loops, which this design keeps apart.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..exceptions import InvalidArgument
from .loop import Worker
from .observer import EVENTS, Observer
from .stats import Stats
from .stopping import StopOnSignal

logger = logging.getLogger("django_lonnymq.worker")


class WorkerGroup(StopOnSignal):
    """Serves ``queues_by_database`` (alias -> queues), one :class:`Worker` per alias."""

    def __init__(self, queues_by_database: Mapping[str, Sequence[str]], **options: Any):
        if len(queues_by_database) < 2:
            raise InvalidArgument("queues", "a worker group serves queues on two databases or more",
                                  dict(queues_by_database))  # fmt: skip
        if options.get("max_messages") is not None:
            raise InvalidArgument(
                "max_messages",
                "cannot be combined with queues on several databases (run one worker per database)",
                options["max_messages"],
            )
        options.pop("using", None)
        self.workers = [
            Worker(queues, using=alias, **options) for alias, queues in queues_by_database.items()
        ]
        first = self.workers[0]
        self.name = first.name
        self.queues = [queue for worker in self.workers for queue in worker.queues]
        self.databases = {worker.using: worker.queues for worker in self.workers}
        self.concurrency = first.concurrency
        self.batch_size = first.batch_size
        self.lease_ms = first.lease_ms
        self.shutdown_timeout = first.shutdown_timeout
        self.held = _AllHeld(self.workers)
        self.observers = _AllObservers(self.workers)
        self._stopping = threading.Event()

    @property
    def announces(self) -> bool:
        """Whether the parts log their start and stop lines (see ``Worker.announces``)."""
        return all(worker.announces for worker in self.workers)

    @announces.setter
    def announces(self, value: bool) -> None:
        for worker in self.workers:
            worker.announces = value

    @property
    def exit_code(self) -> int:
        return max(worker.exit_code for worker in self.workers)

    @property
    def stats(self) -> Stats:
        """The parts' counters added up (elapsed from the earliest start)."""
        total = Stats(started_at=min(worker.stats.started_at for worker in self.workers))
        for field in dataclasses.fields(Stats):
            if field.name != "started_at":
                setattr(total, field.name, sum(getattr(worker.stats, field.name) for worker in self.workers))
        return total

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self, *_: Any) -> None:
        self._stopping.set()
        for worker in self.workers:
            worker.stop()

    def force_stop(self) -> None:
        for worker in self.workers:
            worker.force_stop()

    def run(self) -> Stats:
        """Serve until stopped (or, ``burst``, until every part is idle); the counters.

        A part that stops because it cannot go on (exit status 1) stops the others, so the
        process exits for its supervisor to restart; a part that ends its burst does not.
        """
        (logger.info if self.announces else logger.debug)(
            "worker %s serving %s",
            self.name,
            "; ".join(f"{alias}: {', '.join(queues)}" for alias, queues in self.databases.items()),
        )
        threads = [
            threading.Thread(target=self._serve, args=(worker,), name=f"lonnymq-db-{worker.using}")
            for worker in self.workers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # the main thread stays free for signals
        return self.stats

    def _serve(self, worker: Worker) -> None:
        try:
            worker.run()
        except BaseException:
            logger.exception("worker %s on database %r failed; stopping the others", self.name, worker.using)
            worker.exit_code = worker.exit_code or 1
            raise
        finally:
            if worker.exit_code:
                self.stop()


class _AllHeld:
    """The leases of every part, for the metrics endpoint (queue names differ between parts)."""

    def __init__(self, workers: list[Worker]):
        self.workers = workers

    def by_queue(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for worker in self.workers:
            total.update(worker.held.by_queue())
        return total

    def count(self) -> int:
        return sum(worker.held.count() for worker in self.workers)


class _AllObservers:
    """``add(observer)`` attaches one observer to every part; its ``stopped`` comes once, when
    the last part stopped (the metrics endpoint serves until the process ends)."""

    def __init__(self, workers: list[Worker]):
        self.workers = workers

    def add(self, observer: Observer) -> None:
        shared = _shared(observer, len(self.workers))
        for worker in self.workers:
            worker.observers.add(shared)


def _shared(observer: Observer, parts: int) -> Observer:
    """An observer forwarding to ``observer`` the events it overrides, ``stopped`` once."""
    lock = threading.Lock()
    remaining = [parts]

    def forward(event: str) -> Any:
        def hook(self: Observer, *args: Any) -> None:
            getattr(observer, event)(*args)

        return hook

    def stopped(self: Observer) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            observer.stopped()

    methods: dict[str, Any] = {
        event: forward(event)
        for event in EVENTS
        if event != "stopped" and getattr(type(observer), event) is not getattr(Observer, event)
    }
    methods["stopped"] = stopped
    return type(f"Shared{type(observer).__name__}", (Observer,), methods)()
