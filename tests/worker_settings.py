"""Settings for worker subprocesses started by tests: the test database, no test-DB resolution."""

import environ

from example_project.settings import *  # noqa: F403
from example_project.settings import INSTALLED_APPS

DATABASES = {"default": environ.Env.db_url_config(environ.Env()("DATABASE_URL"))}
INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp"]
LONNYMQ_POLL_INTERVAL = 0.2
LONNYMQ_REAP_INTERVAL = 0.5
