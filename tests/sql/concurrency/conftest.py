"""Concurrency tests: many real connections and processes against the test database.

``LONNYMQ_TEST_EXTRA_SQL=path.sql`` loads an extra SQL file into the test database once it
is migrated: a way to try a change to the queue's functions against these tests before it
goes into a migration.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection


@pytest.fixture(scope="session", autouse=True)
def _extra_sql(django_db_setup: Any, django_db_blocker: Any) -> Iterator[None]:
    path = os.environ.get("LONNYMQ_TEST_EXTRA_SQL")
    if path:
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(Path(path).read_text())
    yield
