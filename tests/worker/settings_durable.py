"""tests.worker_settings plus the durable handlers (handlers_durable)."""

from tests.worker_settings import *  # noqa: F403

LONNYMQ_HANDLER_MODULES = ["tests.worker.handlers_durable"]
