"""tests.worker_settings with a task backend that accepts any queue name (``"QUEUES": []``)."""

from tests.worker_settings import *  # noqa: F403

TASKS = {
    "default": {
        "BACKEND": "django_lonnymq.tasks.LonnyMQBackend",
        "QUEUES": [],
        "OPTIONS": {"CHANNEL_KWARG": "tenant_id", "MAX_ATTEMPTS": 2},
    }
}
