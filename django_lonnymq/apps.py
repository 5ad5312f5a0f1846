"""App config: registers the system checks."""

from django.apps import AppConfig


class LonnyMQConfig(AppConfig):
    name = "django_lonnymq"
    label = "django_lonnymq"
    verbose_name = "Message queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the checks)
