"""What a handler's run leaves that PostgreSQL could refuse: an error text with a NUL or a
lone surrogate is stored escaped (the real error kept, the outcome recorded at once), and a
step output is checked in Python as the database checks it (its stored jsonb size); a bad
outcome fails its own message alone, never the batch it was acked with."""

from __future__ import annotations

import pytest
from django.db import connection

from django_lonnymq import Discard, Message, enqueue, handler
from django_lonnymq.models import DeadMessage
from django_lonnymq.testing import drain

pytestmark = pytest.mark.django_db(transaction=True)

ran: list[int] = []


@handler("sz_bad_error")
def bad_error(message: Message) -> None:
    ran.append(message.id)
    text = "nul\x00here" if message.payload["kind"] == "nul" else "lone\ud800here"
    if message.payload.get("discard"):
        raise Discard(text)
    raise RuntimeError(text)


@pytest.fixture(autouse=True)
def _runs():
    ran.clear()
    yield
    ran.clear()


@pytest.mark.parametrize("kind", ["nul", "surrogate"])
def test_a_discard_whose_reason_cannot_be_stored_is_dead_at_once_with_its_reason_escaped(kind):
    message_id = enqueue("sz_bad_error", {"kind": kind, "discard": True}, max_attempts=3)
    stats = drain("sz_bad_error")
    assert ran == [message_id], "run once: a discard is not retried"
    dead = DeadMessage.objects.get(id=message_id)
    assert dead.reason == "discarded"
    assert dead.last_error == ("nul\\x00here" if kind == "nul" else "lone\\ud800here")
    assert stats.dead == 1 and stats.lease_lost == 0


def test_a_failure_whose_error_cannot_be_stored_is_dead_as_failed_with_its_traceback():
    message_id = enqueue("sz_bad_error", {"kind": "nul"}, max_attempts=1)
    drain("sz_bad_error")
    assert ran == [message_id]
    dead = DeadMessage.objects.get(id=message_id)
    assert dead.reason == "failed"
    assert "RuntimeError: nul\\x00here" in dead.last_error
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM lonnymq_message")
        assert cursor.fetchone()[0] == 0
