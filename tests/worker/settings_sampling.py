"""tests.worker_settings with workers recording a dashboard sample every second."""

from tests.worker_settings import *  # noqa: F403

LONNYMQ_SAMPLE_INTERVAL = 1
