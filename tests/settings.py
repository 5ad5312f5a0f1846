"""Test settings: the example project on the tests' PostgreSQL (see tests/dbserver.py)."""

import environ

from example_project.settings import *  # noqa: F403
from example_project.settings import INSTALLED_APPS
from tests.dbserver import database_url

DATABASES = {"default": environ.Env.db_url_config(database_url())}
DATABASES["default"]["TEST"] = {"NAME": "test_" + DATABASES["default"]["NAME"]}
# A second database on the same server, for queues that live elsewhere (LONNYMQ_QUEUE_DATABASES,
# tests/api/test_queue_databases.py): created only for tests that ask for it
# (``databases=["default", "other"]``).
OTHER_NAME = DATABASES["default"]["NAME"] + "_other"
DATABASES["other"] = {**DATABASES["default"], "NAME": OTHER_NAME, "TEST": {"NAME": "test_" + OTHER_NAME}}

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
