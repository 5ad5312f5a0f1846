"""Workers record the dashboard's history themselves: no cron job.

Every worker, from its maintenance step, calls ``lonnymq_record_samples_due_v1`` every quarter
of ``LONNYMQ_SAMPLE_INTERVAL``. The function records one sample per queue only when no sample
is newer than the interval, and only for the caller that takes the sampler's advisory lock:
however many workers run, samples are at least an interval apart and never recorded twice.
Samples older than ``LONNYMQ_SAMPLE_KEEP`` are dropped by the same call.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from .conf import DEFAULTS, settings, to_ms

if TYPE_CHECKING:
    from .worker import Worker

logger = logging.getLogger("django_lonnymq.worker")

SHORTEST = timedelta(seconds=1)
LONGEST = timedelta(days=1)
KEEP_SHORTEST = timedelta(minutes=1)
KEEP_LONGEST = timedelta(days=366)


def _bounded_ms(name: str, shortest: timedelta, longest: timedelta) -> int:
    """A duration setting in ms, brought within bounds; the default when it is not a
    duration (check lonnymq.E210 reports both): a setting never stops a worker."""
    try:
        value = to_ms(getattr(settings, name))
    except (TypeError, ValueError, OverflowError):
        value = to_ms(DEFAULTS[name])
    return min(max(value, to_ms(shortest)), to_ms(longest))


def interval_ms() -> int | None:
    """The sampling interval in ms (within 1 s .. 1 day), or None when sampling is off."""
    if settings.SAMPLE_INTERVAL is None:
        return None
    return _bounded_ms("SAMPLE_INTERVAL", SHORTEST, LONGEST)


def keep_ms() -> int:
    """How long samples are kept, in ms (within 1 min .. 366 days)."""
    return _bounded_ms("SAMPLE_KEEP", KEEP_SHORTEST, KEEP_LONGEST)


class Sampler:
    """One worker's part in recording samples."""

    def __init__(self, worker: Worker):
        self.worker = worker
        self.next_try = 0.0
        self.recorded = 0  # rows this worker recorded

    def tick(self) -> None:
        """Try when due. A failure is logged and tried again later: it never stops the worker
        (a lost connection is raised, for the worker to reconnect)."""
        every = interval_ms()
        now = time.monotonic()
        if every is None or now < self.next_try:
            return
        # A quarter of the interval: the samples' spacing stays within 1.25 intervals even
        # when the worker that recorded the last one stops.
        self.next_try = now + every / 4000
        try:
            rows = self.worker._scalar("record_samples_due", {"interval_ms": every, "keep_ms": keep_ms()})
        except Exception as exc:
            if self.worker._connection_is_lost(exc):
                raise
            logger.warning("worker %s could not record the dashboard's samples: %s", self.worker.name, exc)
            return
        self.recorded += int(rows or 0)
