"""Settings for the comparison's lonnymq workers and producer: the example project plus a
no-op handler module, DEBUG off (Django's debug cursor would record every query), quiet logs.
The database comes from DATABASE_URL, as in example_project.settings.

Prepared statements are on (``OPTIONS["prepare_threshold"]``, psycopg's own default of 5),
as the raw baseline prepares its INSERT and pgqueuer's asyncpg caches its statements.
``BENCH_LONNYMQ_PREPARED=0`` measures Django's default instead (nothing prepared, for
transaction-mode poolers)."""

import os

from example_project.settings import *  # noqa: F403
from example_project.settings import DATABASES

DEBUG = False
LONNYMQ_HANDLER_MODULES = ["bench.compare.lonnymq_handlers"]
if os.environ.get("BENCH_LONNYMQ_PREPARED", "1") != "0":
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 5
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_lonnymq": {"handlers": ["console"], "level": "WARNING"}},
}
