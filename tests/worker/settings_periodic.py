"""tests.worker_settings with the periodic test schedules (tests/worker/periodic_handlers.py).
The poll interval stays 0.2 s: a tick is due at most that late plus a transaction."""

from tests.worker_settings import *  # noqa: F403

LONNYMQ_HANDLER_MODULES = ["tests.worker.periodic_handlers"]
