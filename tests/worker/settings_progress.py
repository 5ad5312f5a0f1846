"""tests.worker_settings plus the progress handlers (handlers_progress)."""

from tests.worker_settings import *  # noqa: F403

LONNYMQ_HANDLER_MODULES = ["tests.worker.handlers_progress"]
