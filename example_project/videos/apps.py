from django.apps import AppConfig


class VideosConfig(AppConfig):
    """The README's quickstart, as an app that runs (tests/quickstart/ checks both agree)."""

    name = "example_project.videos"
    label = "videos"
    default_auto_field = "django.db.models.BigAutoField"
