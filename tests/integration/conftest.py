"""Fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection


@pytest.fixture(params=["client-binding", "prepared"])
def statement_binding(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a test twice: with Django's defaults (client-side binding, nothing prepared) and
    with prepared statements on, as ``OPTIONS["prepare_threshold"]`` turns them on, which
    sends the API's statements through the server-binding path."""
    if request.param == "client-binding":
        yield request.param
        return
    connection.ensure_connection()
    raw = connection.connection
    before = raw.prepare_threshold
    raw.prepare_threshold = 0
    try:
        yield request.param
    finally:
        raw.prepare_threshold = before
