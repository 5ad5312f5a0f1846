"""tests.worker_settings for the timeout, cancel and async tests: their handlers, a small
retry backoff, a 2 s interrupt grace and a 0.5 s cancel grace."""

from tests.worker_settings import *  # noqa: F403

LONNYMQ_HANDLER_MODULES = ["tests.worker.handlers_control"]
LONNYMQ_RETRY_BACKOFF_BASE = 0.2
LONNYMQ_RETRY_BACKOFF_MAX = 5
LONNYMQ_INTERRUPT_GRACE = 2
LONNYMQ_CANCEL_GRACE = 0.5
