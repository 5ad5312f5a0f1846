"""Settings of the example project: a service where tenants submit jobs of very different sizes.

The database comes from ``DATABASE_URL`` (default: the local PostgreSQL, database ``lonnymq_demo``).
"""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env()

SECRET_KEY = env("DJANGO_SECRET_KEY", default="example-project-not-secret")
DEBUG = env.bool("DJANGO_DEBUG", default=True)
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Django 6 checks that apps using ArrayField (the worker list) have it (postgres.E005).
    "django.contrib.postgres",
    "django_lonnymq",
    "example_project.tenants",
    "example_project.videos",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "example_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": env.db("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/lonnymq_demo"),
}

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # The worker's format (LONNYMQ_LOG_FORMAT: timestamps, level, logger).
    "formatters": {"lonnymq": {"()": "django_lonnymq.logs.Formatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "lonnymq"}},
    "loggers": {
        "django_lonnymq": {"handlers": ["console"], "level": env("LONNYMQ_LOG_LEVEL", default="INFO")}
    },
}
