"""The dashboard's tenants view: who is waiting, and is everyone getting a turn? And the
dashboard opens on the queue with the most ready messages."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_lonnymq import api, db
from django_lonnymq.admin.dashboard import TENANTS
from django_lonnymq.api import Item

from .conftest import dequeue

pytestmark = pytest.mark.django_db

DASHBOARD = reverse("admin:django_lonnymq_channel_dashboard")
QUEUE = "t_tenants"


def rows(page: str) -> list[str]:
    """The tenants table's rows as text, one string per row."""
    table = page[page.index('id="lq-tenants"') : page.index("</table>", page.index('id="lq-tenants"'))]
    body = table[table.index("<tbody>") :]
    return [
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row)).strip()
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.DOTALL)
    ]


def test_tenants_show_who_waits_their_limits_and_share(admin_client: Client) -> None:
    long_ago = timezone.now() - timedelta(minutes=30)
    # starved: waited 30 minutes, at its cap of 1 (one message in flight).
    api.configure_channel(QUEUE, "starved", max_concurrency=1)
    api.enqueue(QUEUE, {"n": 0}, channel="starved")
    assert len(dequeue(QUEUE, batch_size=1)) == 1
    for n in range(3):
        api.enqueue(QUEUE, {"n": n}, channel="starved", run_at=long_ago)
    # busy: released 4 of the queue's 5, nothing left.
    api.enqueue_many(QUEUE, [{"n": n} for n in range(4)], channel="busy")
    assert len(dequeue(QUEUE, batch_size=10)) == 4
    # held: paused with an hour-old backlog; fresh: ready now; later: scheduled only.
    api.enqueue(QUEUE, {"n": 1}, channel="held", run_at=long_ago - timedelta(minutes=30))
    api.configure_channel(QUEUE, "held", paused=True)
    api.enqueue(QUEUE, {"n": 1}, channel="fresh")
    api.enqueue(QUEUE, {"n": 1}, channel="later", delay=timedelta(hours=1))
    api.configure_channel(QUEUE, "fresh", weight=3, rate="10 / min, burst 5")

    page = admin_client.get(DASHBOARD, {"queue": QUEUE}).content.decode()
    found = rows(page)
    names = [row.split(" ")[0] for row in found]
    # Ready ones first, the longest-waiting first; then paused or scheduled; then the idle.
    assert names[:2] == ["starved", "fresh"], found
    assert set(names[2:4]) == {"held", "later"} and names[4] == "busy", found
    starved = found[0]
    assert "at its cap" in starved and "3" in starved and "30 min" in starved and "1 / 1" in starved
    assert "max 1" in starved and "20%" in starved  # 1 of the queue's 5 releases
    assert (
        "ready, waiting for a worker" in found[1]
        and "weight 3" in found[1]
        and "10 / min, burst 5" in found[1]
    )
    held = found[names.index("held")]
    assert held.startswith("held paused paused (1)") and " - " in held  # paused: not waited, not ready
    assert "scheduled only" in found[names.index("later")]
    assert "nothing waiting" in found[4] and "80%" in found[4]
    assert "no per-channel history is recorded" in page


def test_at_most_twenty_tenants_by_a_limited_statement(admin_client: Client) -> None:
    for n in range(TENANTS + 5):
        api.enqueue(QUEUE, {"n": n}, channel=f"c{n:02}")
    found = db.rows("queue_tenants", {"queue": QUEUE, "limit": TENANTS, "cap": 10_000, "candidates": 1_000})
    assert len(found) == TENANTS
    assert [row[1] for row in found] == [f"c{n:02}" for n in range(TENANTS)]  # the oldest heads
    page = admin_client.get(DASHBOARD, {"queue": QUEUE}).content.decode()
    assert len(rows(page)) == TENANTS and f"At most {TENANTS} of the queue's 25 channels" in page


def test_the_dashboard_opens_on_the_queue_with_the_most_ready_messages(admin_client: Client) -> None:
    api.enqueue("a_quiet", {"n": 1})
    api.enqueue_many("z_busy", [{"n": n} for n in range(3)])
    page = admin_client.get(DASHBOARD).content.decode()
    assert "Queue dashboard: z_busy" in page
    assert '<option value="z_busy" selected>' in page


def _message_reads() -> int:
    """Ready-index entries and message heap tuples this transaction has read so far."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_stat_get_xact_tuples_returned('lonnymq_message_ready_idx'::regclass)"
            " + pg_stat_get_xact_tuples_returned('lonnymq_message'::regclass)"
            " + pg_stat_get_xact_tuples_fetched('lonnymq_message'::regclass)"
        )
        return int(cursor.fetchone()[0])


def test_a_large_queue_has_its_heads_looked_up_for_a_bounded_set_of_channels() -> None:
    api.enqueue_many(QUEUE, [Item({"n": n}, channel=f"c{n:03}") for n in range(200)])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE lonnymq_message, lonnymq_channel")  # as autovacuum would
    params = {"queue": QUEUE, "limit": 3, "cap": 10_000}
    before = _message_reads()
    every = db.rows("queue_tenants", {**params, "candidates": 1_000})
    middle = _message_reads()
    bounded = db.rows("queue_tenants", {**params, "candidates": 5})
    after = _message_reads()
    # Not timing: the rows read (the planner may probe each channel's head by index, or scan
    # this small table for it). Within the bound every channel's head is looked up ...
    assert middle - before >= 200
    # ... past it, those of the 5 next in turn (none here: no dequeue has woken these
    # channels yet) and of the 3 with the most in flight, then the counts of the 3 rows shown.
    assert after - middle < (middle - before) / 4, (after - middle, middle - before)
    assert [row[1] for row in bounded] == [row[1] for row in every] == ["c000", "c001", "c002"]


def _beat(name: str, *, in_flight: int, concurrency: int) -> None:
    from datetime import UTC, datetime
    from uuid import uuid4

    from django_lonnymq import sql

    params = {
        "name": name, "instance": str(uuid4()), "host": "h", "pid": 1, "queues": [QUEUE],
        "concurrency": concurrency, "started_at": datetime.now(UTC), "in_flight": in_flight,
        "processed": 0, "failed": 0, "lost_after_ms": 30_000, "prune_after_ms": 86_400_000,
    }  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(sql.query("worker_beat"), params)


def test_ready_work_says_why_it_waits_none_running_or_every_worker_full(admin_client: Client) -> None:
    """Ready work that waits says whether no worker serves the queue, or every one is full
    (as many messages held as threads at its last heartbeat); the workers page marks the full."""
    api.enqueue(QUEUE, {"n": 1}, channel="fresh")

    def state() -> str:
        [row] = rows(admin_client.get(DASHBOARD, {"queue": QUEUE}).content.decode())
        return row

    assert "ready, waiting for a worker: none is running" in state()
    _beat("w-full", in_flight=4, concurrency=4)
    assert "ready, waiting for a worker: all 1 are full" in state()
    _beat("w-free", in_flight=1, concurrency=4)
    assert "ready, waiting for a worker" in state() and "full" not in state() and "none" not in state()

    page = admin_client.get(reverse("admin:django_lonnymq_worker_changelist")).content.decode()
    assert "4 / 4 (full)" in page and "1 / 4 (full)" not in page and "1 / 4" in page
