"""tests.worker_settings plus the acceptance tests' own handlers (handlers_extra)."""

from tests.worker_settings import *  # noqa: F403

LONNYMQ_HANDLER_MODULES = ["tests.worker.handlers_extra"]
