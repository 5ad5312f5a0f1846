"""Fixtures of the admin tests: real users with real permissions, and queue states made
through the queue's own SQL functions (enqueue, dequeue, fail)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection, connections
from django.test import Client

from django_lonnymq import api, sql
from docs.browser import BrowserMissing, chromium

QUEUE = "t_admin"
VIEW_PERMS = ["view_channel", "view_message", "view_deadmessage"]


def dequeue(
    queue: str = QUEUE, batch_size: int = 1, worker: str = "test-worker@host:1"
) -> list[tuple[Any, ...]]:
    """Lease messages as a worker would; rows of the ``dequeue`` named query."""
    with connection.cursor() as cursor:
        cursor.execute(
            sql.query("dequeue"),
            {
                "queue": queue,
                "batch_size": batch_size,
                "lease_ms": 30_000,
                "worker": worker,
                "tolerance_ms": 50,
            },
        )
        return cursor.fetchall()


def fail(message_id: int, token: Any, error: str = "RuntimeError: boom") -> str:
    """Report a failed attempt as a worker would; 'retry' or 'dead'."""
    with connection.cursor() as cursor:
        cursor.execute(
            sql.query("fail"),
            {
                "id": message_id,
                "token": token,
                "error": error,
                "retry_delay_ms": None,
                "reason": "failed",
                "backoff_base_ms": 1000,
                "backoff_max_ms": 3_600_000,
                "tolerance_ms": 50,
            },
        )
        return str(cursor.fetchone()[0])


def ack(message_id: int, token: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql.query("ack"), {"ids": [message_id], "tokens": [str(token)]})


def make_dead(queue: str = QUEUE, channel: str = "acme", error: str = "RuntimeError: boom") -> int:
    """A dead message: enqueued with max_attempts=1, leased, failed once."""
    message_id = api.enqueue(queue, {"job": "report", "channel": channel}, channel=channel, max_attempts=1)
    leased = [row for row in dequeue(queue, batch_size=100) if row[0] == message_id]
    assert leased, "the new message was not released"
    assert fail(message_id, leased[0][8], error) == "dead"
    return message_id


def make_user(username: str, perms: list[str], *, staff: bool = True) -> User:
    user = User.objects.create_user(username, f"{username}@example.com", "pw-" + username, is_staff=staff)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="django_lonnymq", codename__in=perms)
    )
    return User.objects.get(pk=user.pk)  # fresh: no stale permission cache


@pytest.fixture
def make_client(db: None) -> Callable[..., Client]:
    def factory(username: str, perms: list[str], *, staff: bool = True) -> Client:
        client = Client()
        client.force_login(make_user(username, perms, staff=staff))
        return client

    return factory


@pytest.fixture
def viewer_client(make_client: Callable[..., Client]) -> Client:
    """A staff user with view permissions only."""
    return make_client("viewer", VIEW_PERMS)


@pytest.fixture
def browser(transactional_db: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A headless Chromium (docs/browser.py: Debian's chromium, driven by Playwright) for the
    test's pages; fails, never skips, when either is missing (``make test`` installs both).
    Playwright's sync API runs an event loop in this thread: the test's ORM calls are plain
    synchronous code, allowed by DJANGO_ALLOW_ASYNC_UNSAFE."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with contextlib.ExitStack() as stack:
        try:
            launched = stack.enter_context(chromium())
        except BrowserMissing as missing:
            pytest.fail(str(missing))
        try:
            yield launched
        finally:
            # ORM calls made meanwhile ran on connections of Playwright's context (Django's
            # connections are context-local): close them while it lasts, or they outlive the
            # test database.
            connections.close_all()


def admin_page(
    launched: Any,
    base_url: str,
    *,
    width: int,
    height: int,
    user: str = "ops",
    password: str = "correct horse battery",
) -> Any:
    """A page of the ``browser`` fixture, ``width`` x ``height``, logged in to the admin as
    ``user`` (the browser tests create their users with this password)."""
    page = launched.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(15_000)
    page.goto(f"{base_url}/admin/login/?next=/admin/")
    page.fill("#id_username", user)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")
    return page
