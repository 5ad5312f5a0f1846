"""tests.worker_settings plus the handlers of progress and strict order (handlers_asks), with
a small retry backoff (0.3 s base: 0.15-0.3 s after a first failure)."""

from tests.worker_settings import *  # noqa: F403

LONNYMQ_HANDLER_MODULES = ["tests.worker.handlers_asks"]
LONNYMQ_RETRY_BACKOFF_BASE = 0.3
LONNYMQ_RETRY_BACKOFF_MAX = 5
