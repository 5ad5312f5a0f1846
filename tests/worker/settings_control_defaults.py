"""tests.worker_settings with the timeout and cancel test handlers, every grace at its default."""

from tests.worker_settings import *  # noqa: F403

LONNYMQ_HANDLER_MODULES = ["tests.worker.handlers_control"]
