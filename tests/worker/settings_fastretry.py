"""tests.worker_settings with a small retry backoff (0.2 s base), for the retry tests.

Backoff is base * 2 ** (attempt - 1) with equal jitter: 0.1-0.2 s after attempt 1,
0.2-0.4 s after attempt 2.
"""

from tests.worker_settings import *  # noqa: F403

LONNYMQ_RETRY_BACKOFF_BASE = 0.2
LONNYMQ_RETRY_BACKOFF_MAX = 5
LONNYMQ_HANDLER_MODULES = ["tests.worker.handlers_extra"]
