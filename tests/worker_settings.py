"""Settings for worker subprocesses started by tests: the test database, no test-DB resolution."""

import environ

from example_project.settings import *  # noqa: F403
from example_project.settings import INSTALLED_APPS

DATABASES = {"default": environ.Env.db_url_config(environ.Env()("DATABASE_URL"))}
INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp"]
LONNYMQ_POLL_INTERVAL = 0.2
LONNYMQ_REAP_INTERVAL = 0.5

try:  # Django 6 ships django.tasks; Django 5.2 uses the django-tasks backport app.
    import django.tasks  # noqa: F401
except ImportError:
    INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks"]
TASKS = {
    "default": {
        "BACKEND": "django_lonnymq.tasks.LonnyMQBackend",
        "QUEUES": ["default", "tasks_other"],
        "OPTIONS": {"CHANNEL_KWARG": "tenant_id", "MAX_ATTEMPTS": 2},
    }
}
