"""The worker's own connection runs with LONNYMQ_WORKER_SYNCHRONOUS_COMMIT ("on" by default,
so a committed lease or ack survives a server crash, as docs/failure-model.md says)."""

from __future__ import annotations

import threading

import pytest
from django.test import override_settings

from django_lonnymq.worker.connection import ControlConnection
from django_lonnymq.worker.stats import Stats

pytestmark = pytest.mark.django_db(transaction=True)


def worker_setting() -> str:
    conn = ControlConnection("default", "t-sync", Stats(), threading.Event()).connect()
    try:
        return str(conn.execute("SHOW synchronous_commit").fetchone()[0])
    finally:
        conn.close()


def test_the_worker_commits_synchronously_by_default() -> None:
    assert worker_setting() == "on"


@pytest.mark.parametrize("value", ["off", "local", "on"])
def test_the_worker_connection_takes_the_setting(value: str) -> None:
    with override_settings(LONNYMQ_WORKER_SYNCHRONOUS_COMMIT=value):
        assert worker_setting() == value
