"""The lists stay bounded however big the queue: no page of the channel, message or
dead-letter list counts a large table exactly, and no filter sends a list of ids as literals.

Run at a small size, these catch the statements that made the pages take seconds at
1,000,000 messages over 100,000 channels (bench.admin_at_size, docs/admin.md): an unbounded
``COUNT(*)`` grows with the table, and a queue's channel ids written out as ``IN (1, 2, ...)``
grew with the queue's channels (100,000 literals for one queue).
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_lonnymq import api
from django_lonnymq.models import Channel, Message, Plan

from .conftest import QUEUE, make_dead

pytestmark = pytest.mark.django_db

BIG_TABLES = ("lonnymq_message", "lonnymq_dead_message", "lonnymq_channel")
# More channels in one queue than any page lists (list_per_page is at most 100): a filter that
# writes the queue's channel ids out would show a list this long.
CHANNELS = 150
MAX_LITERALS = 100

COUNT = re.compile(r"\bCOUNT\s*\(", re.IGNORECASE)
# IN (...) or ARRAY[...] holding only numbers and commas.
LITERAL_LIST = re.compile(r"\bIN\s*\(([\d\s,]+)\)|\bARRAY\s*\[([\d\s,]+)\]", re.IGNORECASE)


@pytest.fixture
def backlog() -> dict[str, int]:
    """CHANNELS channels of one queue with a message each, a paused one, one following a
    plan, a dead letter, and another queue's message."""
    make_dead(channel="tenant-1")  # first: its dequeue leases what the queue holds
    api.enqueue_many(QUEUE, [api.Item({"n": n}, channel=f"tenant-{n}") for n in range(CHANNELS)])
    api.enqueue("t_admin_other", {"n": "other"}, channel="acme")
    api.configure_channel(QUEUE, "tenant-0", paused=True)
    api.configure_plan("size-plan", max_concurrency=2)
    api.configure_channel(QUEUE, "tenant-2", plan="size-plan")
    channel = Channel.objects.get(queue=QUEUE, name="tenant-3")
    message = Message.objects.filter(channel=channel).order_by("id").first()
    assert message is not None
    return {"channel": channel.pk, "message": message.pk, "plan": Plan.objects.get(name="size-plan").pk}


def filters(backlog: dict[str, int]) -> list[str]:
    channels = reverse("admin:django_lonnymq_channel_changelist")
    messages = reverse("admin:django_lonnymq_message_changelist")
    dead = reverse("admin:django_lonnymq_deadmessage_changelist")
    return [
        channels,
        f"{channels}?queue={QUEUE}",
        f"{channels}?paused__exact=1",
        f"{channels}?paused__exact=0",
        f"{channels}?plan__id__exact={backlog['plan']}",
        f"{channels}?q=tenant-1",
        f"{channels}?p=2",
        messages,
        f"{messages}?queue={QUEUE}",
        f"{messages}?channel={backlog['channel']}",
        f"{messages}?queue={QUEUE}&channel={backlog['channel']}",
        *(f"{messages}?state={state}" for state in ("ready", "scheduled", "paused", "in_flight")),
        *(
            f"{messages}?queue={QUEUE}&state={state}"
            for state in ("ready", "scheduled", "paused", "in_flight")
        ),
        f"{messages}?q={backlog['message']}",
        f"{messages}?p=2",
        dead,
        f"{dead}?queue={QUEUE}",
        f"{dead}?queue={QUEUE}&channel_name=tenant-1",
        f"{dead}?reason__exact=failed",
        f"{dead}?queue={QUEUE}&reason__exact=failed",
    ]


def unbounded_counts(sql: str) -> bool:
    """A COUNT over one of the big tables with no LIMIT anywhere in the statement."""
    return bool(COUNT.search(sql)) and any(t in sql for t in BIG_TABLES) and "LIMIT" not in sql.upper()


def longest_literal_list(sql: str) -> int:
    lists = [m.group(1) or m.group(2) for m in LITERAL_LIST.finditer(sql)]
    return max((len(found.split(",")) for found in lists), default=0)


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_no_list_or_filter_counts_a_big_table_or_writes_ids_out(
    admin_client: Client, backlog: dict[str, int]
) -> None:
    for url in filters(backlog):
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(url)
        assert response.status_code == 200, url
        statements = [query["sql"] for query in captured.captured_queries]
        counting = [sql for sql in statements if unbounded_counts(sql)]
        assert not counting, f"{url} counts a big table exactly: {counting}"
        longest = max(map(longest_literal_list, statements), default=0)
        assert longest <= MAX_LITERALS, f"{url} sends a list of {longest} literal ids"


def test_the_checks_see_what_they_guard_against() -> None:
    """The two detectors flag the statements the lists used to send."""
    assert unbounded_counts('SELECT COUNT(*) AS "__count" FROM "lonnymq_channel"')
    assert not unbounded_counts(
        'SELECT COUNT(*) FROM (SELECT 1 FROM "lonnymq_message" WHERE x LIMIT 10001) subquery'
    )
    ids = ", ".join(str(n) for n in range(1, CHANNELS + 1))
    assert longest_literal_list(f'SELECT 1 FROM "lonnymq_message" WHERE "channel_id" IN ({ids})') == CHANNELS
    assert longest_literal_list(f"SELECT lonnymq_channel_counts_v1(ARRAY[{ids}]::bigint[])") == CHANNELS


def test_queue_filter_lists_the_queue_messages(admin_client: Client, backlog: dict[str, int]) -> None:
    """The subquery filter finds the same messages the id list did: the queue's, not another's."""
    response = admin_client.get(reverse("admin:django_lonnymq_message_changelist"), {"queue": QUEUE})
    listed = response.context["cl"].result_list
    assert response.context["cl"].result_count == CHANNELS
    assert {m.channel.queue for m in listed} == {QUEUE}
