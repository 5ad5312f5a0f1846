"""tests.worker_settings plus the topic tests' consumer groups, with a short retry backoff."""

from tests.worker_settings import *  # noqa: F403

LONNYMQ_HANDLER_MODULES = ["tests.worker.handlers_topics"]
LONNYMQ_RETRY_BACKOFF_BASE = 0.05
LONNYMQ_RETRY_BACKOFF_MAX = 0.2
