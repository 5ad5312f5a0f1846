"""Periodic schedules served by real ``run_queue_worker`` processes.

Ticks are judged on the database's clock: a tick's message records its scheduled time (from
its dedup key) and when it was enqueued (``enqueued_at``, the database's clock).
"""

from __future__ import annotations

import signal
import time

from tests.worker.conftest import DB, HOST, WorkerProc, describe, wait_until
from tests.worker.periodic_handlers import QUEUE

SETTINGS = "tests.worker.settings_periodic"
POLL_S = 0.2  # tests.worker_settings


def start(spawn, schedules: str, *args: str, label: str | None = None) -> WorkerProc:
    return spawn(
        "--queue", QUEUE, *args, settings=SETTINGS, label=label, LQ_TEST_PERIODIC=schedules
    )  # fmt: skip


def ticks(db: DB, channel: str) -> list[dict]:
    """The deliveries of one schedule: scheduled ms, enqueued ms, dedup key, in tick order."""
    return db.rows(
        "SELECT (payload->>'scheduled_ms')::bigint AS scheduled_ms, payload->>'dedup_key' AS dedup_key,"
        " (payload->'payload'->>'schedule') AS schedule, message_id, attempt,"
        " (extract(epoch FROM at) * 1000)::bigint AS handled_ms"
        " FROM testapp_delivery WHERE queue = %s AND channel = %s AND event = 'tick'"
        " ORDER BY (payload->>'scheduled_ms')::bigint, id",
        [QUEUE, channel],
    )


def enqueued_ms(db: DB, channel: str) -> dict[int, int]:
    """When each tick's message was enqueued (ms, database clock), by scheduled tick; from the
    dedup table, which keeps every tick's key (and its time) for LONNYMQ_DEDUP_WINDOW."""
    rows = db.rows(
        "SELECT d.dedup_key, (extract(epoch FROM d.created_at) * 1000)::bigint AS at"
        " FROM lonnymq_dedup d JOIN lonnymq_channel c ON c.id = d.channel_id"
        " WHERE c.queue = %s AND c.name = %s",
        [QUEUE, channel],
    )
    return {int(r["dedup_key"].rsplit(":", 1)[1]): r["at"] for r in rows}


def assert_each_tick_once(found: list[dict], every_ms: int, *procs: WorkerProc) -> list[int]:
    keys = [t["dedup_key"] for t in found]
    assert len(keys) == len(set(keys)), f"a tick was enqueued twice: {keys}\n{describe(*procs)}"
    assert all(t["attempt"] == 1 for t in found), found
    scheduled = [t["scheduled_ms"] for t in found]
    gaps = {b - a for a, b in zip(scheduled, scheduled[1:], strict=False)}
    assert gaps <= {every_ms}, f"ticks missing or repeated: gaps {sorted(gaps)}\n{describe(*procs)}"
    return scheduled


def test_three_workers_enqueue_each_tick_once_and_on_time(spawn, db):
    """30 s of a 1 s schedule (at least 25 ticks) under three workers, one of them busy on a
    long job and one killed half-way: every tick enqueued once (dedup keys unique, no gap),
    none later than the poll interval plus 1 s. The clock starts at the first ticks, so a
    slow worker start takes no tick from the count."""
    workers = [start(spawn, "every1s", label=f"worker {n}") for n in (1, 2)]
    busy = start(spawn, "every1s", "--queue", "t_sleep", label="busy worker")
    workers.append(busy)
    from django_lonnymq import enqueue

    enqueue("t_sleep", {"seconds": 15})  # keeps the busy worker's only handler thread occupied
    db.track_inflight("default")
    wait_until(lambda: len(ticks(db, "every1s")) >= 2, 20, "the first ticks", *workers)
    began = time.monotonic()
    time.sleep(15)
    workers[0].proc.send_signal(signal.SIGKILL)  # a stopped worker delays no tick
    workers[0].wait(timeout=10)
    time.sleep(max(30 - (time.monotonic() - began), 0))
    for worker in workers[1:]:
        assert worker.stop(timeout=40) == 0, describe(*workers)

    # Judged on what was enqueued (the dedup table keeps every tick's key): one key per tick,
    # no gap, none late. Every tick was handled once, except at most what the killed worker
    # held: a tick it dequeued (or handled) and was killed before acking stays leased to it
    # until its lease runs out, after this test.
    enqueued = enqueued_ms(db, "every1s")
    scheduled = sorted(enqueued)
    gaps = {b - a for a, b in zip(scheduled, scheduled[1:], strict=False)}
    assert gaps <= {1000}, f"ticks missing: gaps {sorted(gaps)}\n{describe(*workers)}"
    assert len(scheduled) >= 25, f"only {len(scheduled)} ticks in 30 s\n{describe(*workers)}"
    late = {tick: enqueued[tick] - tick for tick in scheduled if enqueued[tick] - tick > POLL_S * 1000 + 1000}
    assert not late, f"ticks enqueued late (ms): {late}\n{describe(*workers)}"
    killed = f"{HOST}:{workers[0].pid}"
    left = db.rows("SELECT m.leased_by, m.dedup_key FROM lonnymq_message m"
                   " JOIN lonnymq_channel c ON c.id = m.channel_id WHERE c.queue = %s", [QUEUE])  # fmt: skip
    assert all(row["leased_by"] == killed for row in left), f"left in the queue: {left} (killed: {killed})"
    held = {int(row["dedup_key"].rsplit(":", 1)[1]) for row in left if row["dedup_key"]}
    found = ticks(db, "every1s")
    handled = [t["scheduled_ms"] for t in found]
    assert len(handled) == len(set(handled)), f"a tick was handled twice: {handled}\n{describe(*workers)}"
    assert all(t["attempt"] == 1 for t in found), found
    assert set(handled) <= set(enqueued), "every handled tick was enqueued by the schedule"
    assert set(enqueued) - set(handled) <= held, (
        f"ticks never handled: {sorted(set(enqueued) - set(handled) - held)}\n{describe(*workers)}"
    )
    assert db.events("done", "t_sleep"), "the busy worker finished its long job"


def test_after_downtime_one_catch_up_tick_by_default_every_missed_tick_with_catch_up(spawn, db):
    both = "every2s,every2s_catch_up"
    first = start(spawn, both, label="worker before")
    wait_until(
        lambda: len(ticks(db, "every2s")) >= 2 and len(ticks(db, "every2s_catch_up")) >= 2,
        20,
        "ticks before the downtime",
        first,
    )
    assert first.stop() == 0, describe(first)
    stopped_ms = db.scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
    before = {c: len(ticks(db, c)) for c in ("every2s", "every2s_catch_up")}
    time.sleep(10)
    second = start(spawn, both, label="worker after")
    wait_until(
        lambda: all(len(ticks(db, c)) >= before[c] + 3 for c in before),
        30,
        "ticks after the downtime",
        second,
    )
    assert second.stop() == 0, describe(first, second)

    # Default: the ticks missed while no worker ran collapse into one (the latest).
    plain = [t["scheduled_ms"] for t in ticks(db, "every2s")]
    assert len(plain) == len(set(plain))
    last_before = max(t for t in plain if t <= stopped_ms)
    after = [t for t in plain if t > last_before]
    caught_up = after[0]
    assert caught_up - last_before >= 10_000, (plain, stopped_ms)
    assert all(b - a == 2000 for a, b in zip(after, after[1:], strict=False)), after
    # catch_up=100: each missed tick once, none skipped, none twice.
    every = assert_each_tick_once(ticks(db, "every2s_catch_up"), 2000, first, second)
    missed = [t for t in every if last_before < t < caught_up]
    assert len(missed) >= 4, every
    assert len(missed) == (caught_up - last_before) // 2000 - 1


def test_a_declaration_deleted_from_code_stops_at_the_next_worker_start(spawn, db):
    first = start(spawn, "every1s", label="worker that declares it")
    wait_until(lambda: len(ticks(db, "every1s")) >= 2, 20, "ticks of the declared schedule", first)
    assert first.stop() == 0, describe(first)
    assert db.scalar("SELECT count(*) FROM lonnymq_schedule WHERE name = 'every1s'") == 1

    second = start(spawn, "", label="worker whose code no longer declares it")
    wait_until(
        lambda: db.scalar("SELECT count(*) FROM lonnymq_schedule WHERE name = 'every1s'") == 0,
        30,
        "the schedule to be removed",
        second,
    )
    second.wait_for_line("1 removed", timeout=5)
    count = len(ticks(db, "every1s"))
    time.sleep(2.5)
    assert len(ticks(db, "every1s")) == count, describe(second)
    assert second.stop() == 0, describe(second)


def test_a_schedule_row_another_transaction_holds_is_skipped_not_waited_for(spawn, db, connect):
    """A row held by an open transaction (a worker stuck mid-tick) is skipped: the worker
    goes on ticking the other schedules; once the holder ends, the row ticks again, once."""
    worker = start(spawn, "every1s,every2s", label="worker")
    wait_until(lambda: ticks(db, "every1s") and ticks(db, "every2s"), 20, "the first ticks of both", worker)
    holder = connect(autocommit=False)
    holder.execute("SELECT id FROM lonnymq_schedule WHERE name = 'every1s' FOR UPDATE")
    held, other = len(ticks(db, "every1s")), len(ticks(db, "every2s"))
    time.sleep(3)
    assert len(ticks(db, "every1s")) <= held + 1, "ticked a row another transaction holds"
    assert len(ticks(db, "every2s")) >= other + 1, f"the held row stalled the worker\n{describe(worker)}"
    holder.rollback()
    wait_until(lambda: len(ticks(db, "every1s")) >= held + 2, 10, "ticks after the holder ended", worker)
    assert worker.stop() == 0, describe(worker)
    for channel in ("every1s", "every2s"):
        keys = [t["dedup_key"] for t in ticks(db, channel)]
        assert len(keys) == len(set(keys)), keys


def test_paused_edited_and_resumed_in_the_admin_takes_effect_without_a_restart(spawn, db, admin_client):
    from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
    from django.urls import reverse

    from django_lonnymq.models import Schedule

    worker = start(spawn, "every1s", label="worker")
    wait_until(lambda: len(ticks(db, "every1s")) >= 2, 20, "ticks of the declared schedule", worker)
    row = Schedule.objects.get(name="every1s")
    changelist = reverse("admin:django_lonnymq_schedule_changelist")

    admin_client.post(changelist, {"action": "pause", ACTION_CHECKBOX_NAME: [row.pk]})
    paused = len(ticks(db, "every1s"))
    time.sleep(2.5)
    assert len(ticks(db, "every1s")) <= paused + 1, "ticked while paused"  # one may have been in flight

    edit = {
        "queue": QUEUE, "channel": "every1s", "cron": "", "every_seconds": "2", "timezone": "UTC",
        "payload": '{"schedule": "edited"}', "catch_up": "1", "max_attempts": "",
    }  # fmt: skip
    response = admin_client.post(reverse("admin:django_lonnymq_schedule_change", args=[row.pk]), edit)
    assert response.status_code == 302, response.content.decode()[:3000]
    time.sleep(1.5)
    assert len(ticks(db, "every1s")) <= paused + 1, "an edit of a paused schedule resumed it"
    admin_client.post(changelist, {"action": "resume", ACTION_CHECKBOX_NAME: [row.pk]})

    def edited() -> list[dict]:
        return [t for t in ticks(db, "every1s") if t["schedule"] == "edited"]

    wait_until(lambda: len(edited()) >= 3, 15, "ticks with the edited payload", worker)
    assert worker.stop() == 0, describe(worker)
    assert_each_tick_once(edited(), 2000, worker)
    keys = [t["dedup_key"] for t in ticks(db, "every1s")]
    assert len(keys) == len(set(keys))

    # The code still declares what it declared: the next worker start keeps the admin's edit.
    again = start(spawn, "every1s", label="worker restarted")
    again.wait_for_line("0 changed", timeout=30)
    assert again.stop() == 0, describe(again)
    row.refresh_from_db()
    assert row.payload == {"schedule": "edited"} and row.every_ms == 2000
