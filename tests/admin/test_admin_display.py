"""What the admin pages print: times in the user's time zone and format, "-" for none,
labelled rows, no facet counts, a next token only when one is owed, and a next release
that tells "nothing ready" from "ready, waiting for a worker"."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import formats, timezone

from django_lonnymq import api
from django_lonnymq.api import Item
from django_lonnymq.models import Channel, QueueConfig

from .conftest import dequeue

pytestmark = pytest.mark.django_db

QUEUE = "t_display"


def change_page(client: Client, channel_id: int) -> str:
    return client.get(reverse("admin:django_lonnymq_channel_change", args=[channel_id])).content.decode()


def readonly(page: str, field: str) -> str:
    start = page.index(f"field-{field}")
    chunk = page[start : page.index("</div>", page.index('class="readonly"', start))]
    return chunk[chunk.index('class="readonly">') + len('class="readonly">') :].strip()


@override_settings(TIME_ZONE="Europe/Paris")
def test_channel_times_are_local_and_dash_for_none(admin_client: Client) -> None:
    channel_id = api.configure_channel(QUEUE, "acme")
    page = change_page(admin_client, channel_id)
    assert readonly(page, "next_release") == "-" and readonly(page, "last_release") == "-"
    assert "None" not in page
    api.enqueue(QUEUE, {"n": 1}, channel="acme")
    assert len(dequeue(QUEUE)) == 1
    page = change_page(admin_client, channel_id)
    last = Channel.objects.get(pk=channel_id).last_dequeue_at
    moment = datetime.fromtimestamp(last / 1000, tz=timezone.get_fixed_timezone(0))
    local = timezone.localtime(moment, timezone.zoneinfo.ZoneInfo("Europe/Paris"))
    # The date as the user's locale writes it, the time to the second (ticks are seconds apart).
    expected = f"{formats.date_format(local, 'DATE_FORMAT')}, {local:%H:%M:%S}"
    assert readonly(page, "last_release") == expected
    assert "+00:00" not in page


def test_the_links_row_has_a_label(admin_client: Client) -> None:
    page = change_page(admin_client, api.configure_channel(QUEUE, "acme"))
    links = page[page.index("field-links") :]
    assert ">Messages:</label>" in links[:600], links[:600]


def test_no_facet_counts_on_channels_and_schedules(admin_client: Client) -> None:
    api.configure_channel(QUEUE, "acme")
    for name in ("channel", "schedule", "queueconfig", "worker"):
        page = admin_client.get(reverse(f"admin:django_lonnymq_{name}_changelist"), {"_facets": "1"})
        assert "Show counts" not in page.content.decode() and "Hide counts" not in page.content.decode(), name


def test_next_release_tells_nothing_ready_from_waiting_for_a_worker(admin_client: Client) -> None:
    idle = api.configure_channel(QUEUE, "idle")
    api.enqueue(QUEUE, {"n": 1}, channel="waiting")
    api.configure_channel("t_display_cap", "capped", max_concurrency=1)
    api.enqueue_many("t_display_cap", [{"n": 1}, {"n": 2}], channel="capped")
    assert len(dequeue("t_display_cap", batch_size=5)) == 1  # the cap holds the second back

    def next_release(queue: str, name: str) -> str:
        return readonly(
            change_page(admin_client, Channel.objects.get(queue=queue, name=name).pk), "next_release"
        )

    assert readonly(change_page(admin_client, idle), "next_release") == "-"  # nothing due
    assert next_release(QUEUE, "waiting") == "now: waiting for a worker"
    assert next_release("t_display_cap", "capped") == "when a slot frees (at its cap)"
    api.configure_channel("t_display_cap", "gpu", max_concurrency=4)
    api.enqueue_many("t_display_cap", [Item({"n": 1}, slots=2), Item({"n": 2}, slots=3)], channel="gpu")
    assert len(dequeue("t_display_cap", batch_size=5)) == 1  # 2 of 4 slots taken, the next asks 3
    assert next_release("t_display_cap", "gpu") == "when 3 slots are free (its next message takes 3)"
    api.configure_channel(QUEUE, "waiting", paused=True)
    assert next_release(QUEUE, "waiting") == "- (paused)"


def test_next_token_only_when_one_is_owed(admin_client: Client) -> None:
    api.configure_queue(QUEUE, rate="1 / h, burst 1")
    changelist = reverse("admin:django_lonnymq_queueconfig_changelist")

    def next_token() -> str:
        page = admin_client.get(changelist).content.decode()
        cell = page[page.index('class="field-next_token"') :]
        return cell[cell.index(">") + 1 : cell.index("</td>")].strip()

    assert next_token() == "-"  # a full bucket owes nothing
    api.enqueue(QUEUE, {"n": 1})
    assert len(dequeue(QUEUE)) == 1  # the one token is spent: the next is an hour away
    owed = QueueConfig.objects.get(queue=QUEUE).next_token_at
    assert owed is not None and owed > timezone.now().timestamp() * 1000
    assert next_token() not in ("-", "") and "+00:00" not in next_token()
