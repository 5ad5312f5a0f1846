"""tests.worker_settings with a 30 s poll and reap interval: an idle worker only wakes early
through LISTEN/NOTIFY (or a finished handler, or its own heartbeat)."""

from tests.worker_settings import *  # noqa: F403

LONNYMQ_POLL_INTERVAL = 30
LONNYMQ_REAP_INTERVAL = 30
LONNYMQ_HANDLER_MODULES = ["tests.worker.handlers_extra"]
