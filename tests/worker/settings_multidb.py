"""A worker whose queues live on two databases: ``t_noop`` and ``t_sleep`` on ``other``
(OTHER_DATABASE_URL), the rest on ``default`` (DATABASE_URL)."""

import environ

from tests.worker_settings import *  # noqa: F403
from tests.worker_settings import DATABASES

DATABASES = {**DATABASES, "other": environ.Env.db_url_config(environ.Env()("OTHER_DATABASE_URL"))}
LONNYMQ_QUEUE_DATABASES = {"t_noop": "other", "t_sleep": "other"}
