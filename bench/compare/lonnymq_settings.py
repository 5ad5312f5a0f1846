"""Settings for the comparison's lonnymq workers and producer: the example project plus a
no-op handler module, DEBUG off (Django's debug cursor would record every query), quiet logs.
The database comes from DATABASE_URL, as in example_project.settings."""

from example_project.settings import *  # noqa: F403

DEBUG = False
LONNYMQ_HANDLER_MODULES = ["bench.compare.lonnymq_handlers"]
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_lonnymq": {"handlers": ["console"], "level": "WARNING"}},
}
