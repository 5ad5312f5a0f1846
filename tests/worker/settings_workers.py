"""tests.worker_settings with short worker heartbeats, so lost and pruned rows come quickly."""

from tests.worker_settings import *  # noqa: F403

LONNYMQ_WORKER_HEARTBEAT = 0.3
LONNYMQ_WORKER_LOST_AFTER = 5
LONNYMQ_WORKER_PRUNE_AFTER = 12
