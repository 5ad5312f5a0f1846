"""A stored payload Python's json cannot decode (nested deeper than it goes, written before
enqueue refused such payloads or past it) leaves the admin and ``lonnymq_health`` working:
the pages show a placeholder for that payload and nothing else changes."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from django_lonnymq import api

from .conftest import QUEUE, make_dead

pytestmark = pytest.mark.django_db

DEEP = "(repeat('[', 3000) || repeat(']', 3000))::jsonb"
PLACEHOLDER = "payload cannot be decoded"


def make_undecodable(table: str, message_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET payload = {DEEP} WHERE id = %s", [message_id])


def test_message_pages_show_a_placeholder(admin_client: Client) -> None:
    poison = api.enqueue(QUEUE, {"n": 1}, channel="acme")
    fine = api.enqueue(QUEUE, {"n": 2}, channel="globex")
    make_undecodable("lonnymq_message", poison)

    listed = admin_client.get(reverse("admin:django_lonnymq_message_changelist"))
    assert listed.status_code == 200
    assert {row.pk for row in listed.context["cl"].result_list} == {poison, fine}
    detail = admin_client.get(reverse("admin:django_lonnymq_message_change", args=[poison]))
    assert detail.status_code == 200
    assert PLACEHOLDER in detail.content.decode()
    other = admin_client.get(reverse("admin:django_lonnymq_message_change", args=[fine]))
    assert other.status_code == 200 and "&quot;n&quot;: 2" in other.content.decode()


def test_dead_letter_pages_show_a_placeholder(admin_client: Client) -> None:
    dead = make_dead()
    make_undecodable("lonnymq_dead_message", dead)

    listed = admin_client.get(reverse("admin:django_lonnymq_deadmessage_changelist"))
    assert listed.status_code == 200
    assert [row.pk for row in listed.context["cl"].result_list] == [dead]
    detail = admin_client.get(reverse("admin:django_lonnymq_deadmessage_change", args=[dead]))
    assert detail.status_code == 200
    assert PLACEHOLDER in detail.content.decode()


def test_health_does_not_read_payloads(capsys: pytest.CaptureFixture[str]) -> None:
    make_undecodable("lonnymq_message", api.enqueue(QUEUE, {"n": 1}))
    make_undecodable("lonnymq_dead_message", make_dead())
    try:
        call_command("lonnymq_health", "--max-dead-tuples", "100000000", "--max-xact-age", "100000")
    except SystemExit:
        pass
    except Exception as exc:  # an alarm (no worker serves the queue) is fine; a crash is not
        assert type(exc).__name__ == "CommandError", repr(exc)
    assert "RecursionError" not in capsys.readouterr().err
