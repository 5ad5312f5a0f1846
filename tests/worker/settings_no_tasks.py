"""tests.worker_settings without any Django Tasks backend of this app."""

from tests.worker_settings import *  # noqa: F403

try:
    import django.tasks  # noqa: F401

    TASKS = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}
except ImportError:
    TASKS = {"default": {"BACKEND": "django_tasks.backends.dummy.DummyBackend"}}
