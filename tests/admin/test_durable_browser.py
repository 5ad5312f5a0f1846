"""A durable handler's message in a real headless browser: its page lists the checkpoints
(each step's result, the pending wait and its event key), "Resume now" ends the wait, and "Run
again from here" forgets a step and the ones after it. A view-only user sees the checkpoints
and no button, and a post of theirs is refused (403); a GET is not allowed (405)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client

from django_lonnymq import Message, enqueue, handler
from django_lonnymq.registry import unregister
from django_lonnymq.testing import eager

from .conftest import admin_page

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "d_admin"


@pytest.fixture
def order_handler() -> Iterator[None]:
    def provision(message: Message) -> None:
        message.step("charge", lambda: {"charged": 42, "receipt": "x" * 300})
        message.step("email", lambda: "sent")
        message.wait("approval", f"order-{message.payload['order']}", timeout=3600)

    handler(QUEUE)(provision)
    yield
    unregister(QUEUE)


def wait_due(message_id: int) -> bool:
    """The message's wait has timed out (a resume sets its time to now)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT until_ms <= lonnymq_now_ms_v1() FROM lonnymq_step WHERE message_id = %s AND kind = 'wait'",
            [message_id],
        )
        return bool(cursor.fetchone()[0])


def checkpoints(message_id: int) -> list[tuple[str, str, bool]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, kind, done FROM lonnymq_step WHERE message_id = %s ORDER BY created_at, name",
            [message_id],
        )
        return list(cursor.fetchall())


def test_an_operator_resumes_a_waiting_message_and_runs_it_again_from_a_step(  # type: ignore[no-untyped-def]
    live_server, browser, order_handler
) -> None:
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    viewer = User.objects.create_user("viewer", "v@example.com", "correct horse battery", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_message"))
    with eager():
        message_id = enqueue(QUEUE, {"order": 7}, channel="tenant-acme")
    assert sorted(checkpoints(message_id)) == [
        ("approval", "wait", False),
        ("charge", "step", True),
        ("email", "step", True),
    ]

    page = admin_page(browser, live_server.url, width=1366, height=900)
    url = f"{live_server.url}/admin/django_lonnymq/message/{message_id}/change/"
    page.goto(url)
    table = page.locator("#lq-checkpoints")
    assert table.locator("tr.lq-checkpoint").count() == 3
    text = table.inner_text()
    assert '"charged": 42' in text and "bytes)" in text  # cut at 200 characters, with its size
    assert "waiting for event order-7" in text
    assert page.locator("#lq-message-resume").is_visible()

    page.click("#lq-message-resume")
    page.wait_for_selector("ul.messagelist li.success")
    assert f"Message {message_id} resumed" in page.locator("ul.messagelist").inner_text()
    assert wait_due(message_id)
    assert page.locator("#lq-message-resume").count() == 0  # nothing pending any more

    page.locator("tr.lq-checkpoint", has_text="email").locator("button.lq-run-again").click()
    page.wait_for_selector("ul.messagelist li.success")
    assert "runs again from step 'email'" in page.locator("ul.messagelist").inner_text()
    assert checkpoints(message_id) == [("charge", "step", True)]
    assert page.locator("tr.lq-checkpoint").count() == 1

    # A view-only user sees the checkpoints, and no button.
    view = admin_page(browser, live_server.url, width=1366, height=900, user="viewer")
    view.goto(url)
    assert view.locator("tr.lq-checkpoint").count() == 1
    assert (
        view.locator("button.lq-run-again").count() == 0 and view.locator("#lq-message-resume").count() == 0
    )


def test_the_buttons_post_with_the_change_permission_only(order_handler) -> None:  # type: ignore[no-untyped-def]
    viewer = User.objects.create_user("viewer", "v@example.com", "pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_message"))
    with eager():
        message_id = enqueue(QUEUE, {"order": 8})
    client = Client()
    client.force_login(viewer)
    base = f"/admin/django_lonnymq/message/{message_id}"
    assert client.post(f"{base}/resume/").status_code == 403
    assert client.post(f"{base}/run-again/", {"step": "charge"}).status_code == 403
    assert len(checkpoints(message_id)) == 3
    admin = User.objects.create_superuser("ops", "ops@example.com", "pw")
    client.force_login(admin)
    assert client.get(f"{base}/resume/").status_code == 405
    # A step the message never wrote: an error message, nothing forgotten.
    response = client.post(f"{base}/run-again/", {"step": "nothing"}, follow=True)
    assert "names no checkpoint" in response.content.decode()
    assert len(checkpoints(message_id)) == 3
    # The dashboard counts the queue's suspended message; resumed, it is due and counts no more.
    dashboard = client.get(f"/admin/django_lonnymq/channel/dashboard/?queue={QUEUE}").content.decode()
    assert '<td class="lq-num lq-suspended">1</td>' in dashboard
    client.post(f"{base}/resume/")
    dashboard = client.get(f"/admin/django_lonnymq/channel/dashboard/?queue={QUEUE}").content.decode()
    assert '<td class="lq-num lq-suspended">0</td>' in dashboard
