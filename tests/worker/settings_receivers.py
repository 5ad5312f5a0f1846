"""tests.worker_settings plus a handler and a message_finished receiver (handlers_receivers)."""

from tests.worker_settings import *  # noqa: F403

LONNYMQ_HANDLER_MODULES = ["tests.worker.handlers_receivers"]
