"""tests.worker_settings without any LOGGING for django_lonnymq, and a format of its own: the
worker adds its console handler (tests/worker/test_logging.py)."""

from tests.worker_settings import *  # noqa: F403

LOGGING = {"version": 1, "disable_existing_loggers": False}
LONNYMQ_LOG_FORMAT = "LQ|%(levelname)s|%(name)s|%(message)s"
