"""Workers record the dashboard's history themselves: no cron job.

Every worker, from its maintenance step (``worker.housekeeping.Samples``), calls
``lonnymq_record_samples_due_v2`` every quarter of ``LONNYMQ_SAMPLE_INTERVAL``. The function
records one sample per queue only when no sample is newer than the interval, and only for the
caller that takes the sampler's advisory lock: however many workers run, samples are at least
an interval apart and never recorded twice. Samples older than ``LONNYMQ_SAMPLE_KEEP`` are
dropped by the same call. The figures are exact up to ``LONNYMQ_STATS_COUNT_CAP`` waiting
messages per queue and estimated past it (:func:`count_cap`). This module holds the settings'
bounds (system checks read them too).
"""

from __future__ import annotations

from datetime import timedelta

from .conf import DEFAULTS, settings, to_ms

SHORTEST = timedelta(seconds=1)
LONGEST = timedelta(days=1)
KEEP_SHORTEST = timedelta(minutes=1)
KEEP_LONGEST = timedelta(days=366)
# LONNYMQ_STATS_COUNT_CAP's bounds (lonnymq_queue_stats_v3 refuses others).
COUNT_CAP_SMALLEST = 1
COUNT_CAP_LARGEST = 1_000_000_000


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


def count_cap() -> int:
    """How many waiting messages (and dead letters) of a queue the figures count exactly before
    they estimate (``LONNYMQ_STATS_COUNT_CAP``, within bounds; the default when it is not an
    integer: check lonnymq.E300 reports it)."""
    value = settings.STATS_COUNT_CAP
    if not isinstance(value, int) or isinstance(value, bool):
        value = DEFAULTS["STATS_COUNT_CAP"]
    return min(max(value, COUNT_CAP_SMALLEST), COUNT_CAP_LARGEST)
