"""Settings of the benchmark's worker processes: the example project, the bench handlers.

The database comes from ``DATABASE_URL`` (the bench sets it to its own database, lq_bench).
"""

import os

from example_project.settings import *  # noqa: F403
from example_project.settings import DATABASES

# Handler threads keep their connection between messages (Django's default of 0 would open
# one per message for any handler that touches the database).
DATABASES["default"]["CONN_MAX_AGE"] = 60

LONNYMQ_HANDLER_MODULES = ["bench.handlers"]

# The workers' synchronous_commit (default "on"): LQ_BENCH_SYNCHRONOUS_COMMIT=off measures the
# other setting (docs/performance.md).
LONNYMQ_WORKER_SYNCHRONOUS_COMMIT = os.environ.get("LQ_BENCH_SYNCHRONOUS_COMMIT", "on")

# LQ_BENCH_CHANNEL_IDLE_PRUNE: "off" (None) or seconds; unset: the app's default (a day).
# bench.channel_churn runs its workers with pruning off, then on.
if os.environ.get("LQ_BENCH_CHANNEL_IDLE_PRUNE"):
    _prune = os.environ["LQ_BENCH_CHANNEL_IDLE_PRUNE"]
    LONNYMQ_CHANNEL_IDLE_PRUNE = None if _prune == "off" else float(_prune)

# The workers' own VACUUM of the channel table: LQ_BENCH_VACUUM_THRESHOLD=off measures the
# queue without it (bench.sequence --ab).
if os.environ.get("LQ_BENCH_VACUUM_THRESHOLD"):
    _threshold = os.environ["LQ_BENCH_VACUUM_THRESHOLD"]
    LONNYMQ_VACUUM_THRESHOLD = None if _threshold == "off" else int(_threshold)

# The workers' dashboard samples: LQ_BENCH_SAMPLE_INTERVAL=off measures a drain without
# them (bench.drain_buffers).
if os.environ.get("LQ_BENCH_SAMPLE_INTERVAL"):
    _sample = os.environ["LQ_BENCH_SAMPLE_INTERVAL"]
    LONNYMQ_SAMPLE_INTERVAL = None if _sample == "off" else float(_sample)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_lonnymq": {"handlers": ["console"], "level": "WARNING"}},
}
