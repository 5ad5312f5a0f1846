"""End to end in a real headless browser (Debian's chromium, driven by Playwright): log in,
change a channel's limit, requeue a dead message, screenshot the dashboard.

Fails, never skips, when chromium or Playwright is missing (the ``browser`` fixture of
conftest.py, docs/browser.py): ``make test`` installs both.
The screenshots land in ``test-output/`` at the repository root: ``dashboard.png`` (and
``channels.png``, ``dead_messages.png`` on the way).
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from django.contrib.auth.models import User
from django.db import connections

from django_lonnymq import api, sql
from django_lonnymq.models import Channel, DeadMessage, Message, QueueSample

from .conftest import ack, admin_page, dequeue, make_dead

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "test-output"
SCREENSHOT = OUTPUT / "dashboard.png"
QUEUE = "transcode"


def workload() -> int:
    """A small real history: tenants enqueue, a worker drains, samples are recorded between.
    Returns the id of a dead message of tenant acme."""
    dead_id = make_dead(
        QUEUE, channel="acme", error="Traceback (most recent call last):\nValueError: corrupt input"
    )
    make_dead(QUEUE, channel="globex", error="TimeoutError: upstream took 31 s")
    api.configure_channel(QUEUE, "acme", max_concurrency=2)
    api.configure_channel(QUEUE, "initech", release_interval=0.1)
    for n in range(40):
        api.enqueue(QUEUE, {"video": n}, channel=("acme", "globex", "initech", "umbrella")[n % 4])
    api.enqueue(QUEUE, {"video": "nightly"}, channel="globex", delay=3600)
    for round_ in range(16):
        QueueSample.record()
        leased = dequeue(QUEUE, batch_size=3)
        for message_id, *rest in leased[: 2 if round_ % 4 == 0 else 3]:  # some stay in flight
            ack(message_id, rest[7])
        if round_ in (5, 6, 7):
            api.enqueue_many(QUEUE, [{"video": f"burst-{round_}-{n}"} for n in range(4)], channel="umbrella")
        time.sleep(0.25)
    QueueSample.record()
    return dead_id


def workers_seen() -> None:
    """Three worker rows through the heartbeat SQL: encoder-1 live and holding two leases,
    encoder-2 silent for a minute (lost), encoder-3 stopped."""
    instances = {name: str(uuid.uuid4()) for name in ("encoder-1", "encoder-2", "encoder-3")}
    with connections["default"].cursor() as cursor:
        for name, instance in instances.items():
            cursor.execute(
                sql.query("worker_beat"),
                {
                    "name": name, "instance": instance, "host": "render-box", "pid": 4000,
                    "queues": [QUEUE], "concurrency": 4, "started_at": datetime.now(UTC),
                    "in_flight": 2 if name == "encoder-1" else 0, "processed": 10, "failed": 1,
                    "lost_after_ms": 30_000, "prune_after_ms": 86_400_000,
                },
            )  # fmt: skip
        cursor.execute(
            sql.query("worker_stop"),
            {
                "name": "encoder-3",
                "instance": instances["encoder-3"],
                "in_flight": 0,
                "processed": 12,
                "failed": 1,
            },
        )
        cursor.execute(
            "UPDATE lonnymq_worker SET heartbeat_at = heartbeat_at - interval '1 minute' WHERE name = 'encoder-2'"
        )
    assert len(dequeue(QUEUE, batch_size=2, worker="encoder-1")) == 2


def test_ops_change_a_limit_requeue_and_see_the_dashboard(live_server, browser) -> None:  # type: ignore[no-untyped-def]
    User.objects.create_superuser("ops", "ops@example.com", "correct horse battery")
    dead_id = workload()
    acme = Channel.objects.get(queue=QUEUE, name="acme")
    assert acme.max_concurrency == 2

    SCREENSHOT.parent.mkdir(exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    page = admin_page(browser, live_server.url, width=1440, height=900)
    assert "Site administration" in page.content()

    # Change acme's concurrency limit in the channel list.
    page.goto(f"{live_server.url}/admin/django_lonnymq/channel/?queue={QUEUE}&q=acme")
    limit = page.locator("input[name='form-0-max_concurrency']")
    assert limit.input_value() == "2"
    limit.fill("5")
    page.click("input[name='_save']")
    page.wait_for_selector("ul.messagelist li.success")
    assert page.locator("input[name='form-0-max_concurrency']").input_value() == "5"
    page.goto(f"{live_server.url}/admin/django_lonnymq/channel/?queue={QUEUE}")
    page.screenshot(path=str(OUTPUT / "channels.png"), full_page=True)
    acme.refresh_from_db()
    assert acme.max_concurrency == 5

    # Requeue acme's dead message.
    page.goto(f"{live_server.url}/admin/django_lonnymq/deadmessage/?queue={QUEUE}")
    page.screenshot(path=str(OUTPUT / "dead_messages.png"), full_page=True)
    page.check(f"input[name='_selected_action'][value='{dead_id}']")
    page.select_option("select[name='action']", "requeue")
    page.click("button[name='index']")
    page.wait_for_selector("ul.messagelist li.success")
    assert "Requeued 1 dead message, with its attempts reset" in page.locator("ul.messagelist").inner_text()
    assert not DeadMessage.objects.filter(pk=dead_id).exists()
    assert Message.objects.get(pk=dead_id).attempts == 0

    # The dashboard, with the history recorded above and the figures now.
    QueueSample.record()
    page.goto(f"{live_server.url}/admin/django_lonnymq/channel/dashboard/?queue={QUEUE}&minutes=15")
    page.wait_for_selector("svg.lq-chart polyline")
    assert page.locator("svg.lq-chart").count() == 3
    figures = page.locator("#lq-figures").inner_text()
    assert "in flight" in figures and "oldest ready message has waited" in figures
    assert "released per minute" in figures
    # The workload released messages between its samples: a real throughput figure.
    assert page.locator("#lq-throughput .lq-value").inner_text() not in ("-", "0.0")
    page.screenshot(path=str(SCREENSHOT), full_page=True)

    # The worker list: one live, one lost (silent), one stopped; a held message links to its worker.
    workers_seen()
    page.goto(f"{live_server.url}/admin/django_lonnymq/worker/")
    page.wait_for_selector("#result_list")
    states = {
        row.locator("th.field-name").inner_text(): row.locator("td.field-state_display").inner_text()
        for row in page.locator("#result_list tbody tr").all()
    }
    assert states == {"encoder-1": "live", "encoder-2": "lost", "encoder-3": "stopped"}
    live_row = page.locator("#result_list tbody tr", has_text="encoder-1")
    assert live_row.locator("td.field-in_flight_of").inner_text() == "2 / 4"
    assert live_row.locator("td.field-leases_now").inner_text() == "2"
    page.screenshot(path=str(OUTPUT / "workers.png"), full_page=True)
    live_row.locator("td.field-leases_now a").click()
    page.wait_for_selector("#result_list")
    page.locator("#result_list td.field-leased_by_display a").first.click()
    page.wait_for_selector("div.field-name")
    assert "encoder-1" in page.locator("div.field-name").inner_text()

    assert SCREENSHOT.exists() and SCREENSHOT.stat().st_size > 10_000
