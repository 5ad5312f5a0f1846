"""Test settings: the example project on the tests' PostgreSQL (see tests/dbserver.py)."""

import environ

from example_project.settings import *  # noqa: F403
from example_project.settings import INSTALLED_APPS
from tests.dbserver import database_url

DATABASES = {"default": environ.Env.db_url_config(database_url())}
DATABASES["default"]["TEST"] = {"NAME": "test_" + DATABASES["default"]["NAME"]}

INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGGING = {"version": 1, "disable_existing_loggers": False}

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
