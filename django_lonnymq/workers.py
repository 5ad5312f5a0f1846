"""Workers you can see: each worker keeps a ``lonnymq_worker`` row up to date.

The worker's control thread calls :meth:`Presence.tick` from its maintenance step (where it
already extends leases and reaps): one ``lonnymq_worker_beat_v1`` call every
``LONNYMQ_WORKER_HEARTBEAT``, on its own clock, never one per message. A graceful shutdown
calls :meth:`Presence.stopped`, so the row reads "stopped" at once; a worker killed or cut off
stops beating and reads "lost" once silent for ``LONNYMQ_WORKER_LOST_AFTER``. Any worker's
beat deletes rows lost or stopped for longer than ``LONNYMQ_WORKER_PRUNE_AFTER``.

Names: a worker is named ``host:pid`` unless given one (``run_queue_worker --name``). A name
is unique among the rows: a worker whose name a live worker holds takes ``name#2`` (``#3``...)
instead, and leases under that name, so a message's ``leased_by`` always names one worker. A
name whose holder stopped or went lost is taken over by the next worker that asks for it.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from datetime import datetime
from typing import TYPE_CHECKING

from django.utils import timezone

from . import arguments, bounds, db
from .conf import lost_after, settings

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from .models import Worker as WorkerRow
    from .worker import Worker

logger = logging.getLogger("django_lonnymq.worker")

MAX_NAME = bounds.MAX_WORKER_NAME


def check_name(name: object) -> str:
    """A worker name: 1 to 200 characters, not only blanks, no NUL."""
    return arguments.name("name", name, MAX_NAME)


def with_state(queryset: QuerySet[WorkerRow]) -> QuerySet[WorkerRow]:
    """Workers annotated with ``lq_state`` (on the database's clock) and ``lq_leases``, the
    leases their name holds now (through the in-flight index: only leased messages are read)."""
    from django.db.models import (
        Case,
        Count,
        DateTimeField,
        ExpressionWrapper,
        IntegerField,
        OuterRef,
        Subquery,
        Value,
        When,
    )
    from django.db.models.functions import Coalesce, Now

    from .models import Message

    cutoff = ExpressionWrapper(Now() - Value(lost_after()), output_field=DateTimeField())
    leases = (
        Message.objects.filter(leased_by=OuterRef("name"), lease_until__isnull=False)
        .order_by()
        .values("leased_by")
        .annotate(n=Count("id"))
        .values("n")
    )
    return queryset.annotate(
        lq_state=Case(
            When(stopped_at__isnull=False, then=Value("stopped")),
            When(heartbeat_at__lt=cutoff, then=Value("lost")),
            default=Value("live"),
        ),
        lq_leases=Coalesce(Subquery(leases, output_field=IntegerField()), Value(0)),
    )


STATES = ("live", "lost", "stopped")


def listing(state: str | None = None, *, using: str | None = None) -> QuerySet[WorkerRow]:
    """The workers' rows, each with ``lq_state`` (``live``/``lost``/``stopped``, on the
    database's clock) and ``lq_leases`` (leases its name holds now); ``state`` keeps one."""
    from .exceptions import InvalidArgument
    from .models import Worker as WorkerRow

    rows = with_state(WorkerRow.objects.using(db.alias(using)).all())
    if state is None:
        return rows
    if state not in STATES:
        raise InvalidArgument("state", f"must be one of {', '.join(STATES)}", state)
    return rows.filter(lq_state=state)  # type: ignore[misc]  # annotated by with_state


class Presence:
    """A worker's row in ``lonnymq_worker``: registered at the first beat, kept by later ones."""

    def __init__(self, worker: Worker):
        check_name(worker.name)
        self.worker = worker
        self.instance = uuid.uuid4()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started_at: datetime = timezone.now()
        self.next_beat = 0.0
        self.beats = 0

    def _figures(self) -> dict[str, int]:
        stats = self.worker.stats
        return {
            "in_flight": len(self.worker._running),
            "processed": stats.acked,
            "failed": stats.retried + stats.dead,
        }

    def tick(self) -> None:
        """Beat when due. A failed beat is logged and tried at the next one: it never stops the
        worker from serving its queues (a lost connection is raised, for the worker to reconnect)."""
        now = time.monotonic()
        if now < self.next_beat:
            return
        self.next_beat = now + settings.ms("WORKER_HEARTBEAT") / 1000
        try:
            name = self.worker._scalar(
                "worker_beat",
                {
                    "name": self.worker.name,
                    "instance": str(self.instance),
                    "host": self.host,
                    "pid": self.pid,
                    "queues": self.worker.queues,
                    "concurrency": self.worker.concurrency,
                    "started_at": self.started_at,
                    "lost_after_ms": settings.ms("WORKER_LOST_AFTER"),
                    "prune_after_ms": settings.ms("WORKER_PRUNE_AFTER"),
                    **self._figures(),
                },
            )
        except Exception as exc:
            if self.worker._connection_is_lost(exc):
                raise
            logger.warning("worker %s could not write its heartbeat row: %s", self.worker.name, exc)
            return
        self.beats += 1
        if name and name != self.worker.name:
            logger.warning(
                "worker name %s is held by a live worker; this worker is %s", self.worker.name, name
            )
            self.worker.name = name

    def stopped(self) -> None:
        """Mark the row stopped (graceful shutdown); a failure is only logged."""
        if not self.beats:
            return
        try:
            self.worker._scalar(
                "worker_stop", {"name": self.worker.name, "instance": str(self.instance), **self._figures()}
            )
        except Exception as exc:
            logger.warning("worker %s could not mark its row stopped: %s", self.worker.name, exc)
