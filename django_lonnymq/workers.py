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
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.utils import timezone

from .conf import settings

if TYPE_CHECKING:
    from .worker import Worker

logger = logging.getLogger("django_lonnymq.worker")

MAX_NAME = 200


def lost_after() -> timedelta:
    """How long a worker may be silent before it shows as lost."""
    return timedelta(milliseconds=settings.ms("WORKER_LOST_AFTER"))


def check_name(name: object) -> str:
    """A worker name: 1 to 200 characters, not only blanks, no NUL."""
    from .api import _name

    return _name("name", name, MAX_NAME)


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
