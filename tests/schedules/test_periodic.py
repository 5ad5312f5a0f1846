"""Periodic schedules against the real database: declarations, sync, ticks, DST, bad input.

Ticks run through the same calls a worker makes (``schedules.tick`` on a psycopg
connection), with the clock given (``now_ms``) where a test needs a day the calendar does
not offer today.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import psycopg
import pytest

from django_lonnymq import Message, periodic, schedules, sql
from django_lonnymq.exceptions import InvalidArgument, PayloadError
from django_lonnymq.models import Schedule
from django_lonnymq.schedules import sync, tick
from tests.sql import test_search_path_attack

attacker = test_search_path_attack.attacker  # the fixture that plants look-alikes

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "p_reports"
NEW_YORK = ZoneInfo("America/New_York")


def target(message: Message) -> None:
    """A stand-in handler for declarations."""


@pytest.fixture
def declared() -> Iterator[list[str]]:
    """Names this test declares; forgotten afterwards, so no other test syncs them."""
    names: list[str] = []
    before = {d.name for d in schedules.declarations()}
    yield names
    for declaration in schedules.declarations():
        if declaration.name not in before:
            schedules.forget(declaration.name)


@pytest.fixture
def conn(connect) -> psycopg.Connection:
    return connect()


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def messages(conn: psycopg.Connection, queue: str = QUEUE) -> list[tuple[int, str, int, dict]]:
    return conn.execute(
        "SELECT m.id, m.dedup_key, m.dequeue_at, m.payload FROM lonnymq_message m"
        " JOIN lonnymq_channel c ON c.id = m.channel_id WHERE c.queue = %s ORDER BY m.dequeue_at, m.id",
        [queue],
    ).fetchall()


def only(declarations: list[schedules.Declaration], *names: str) -> list[schedules.Declaration]:
    return [d for d in declarations if d.name in names]


# ---------------------------------------------------------------------------------------
# Bad input: a clear error at declaration, nothing registered, nothing written
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "field"),
    [
        ({"cron": "61 * * * *"}, InvalidArgument, "cron"),
        ({"cron": "* * * *"}, InvalidArgument, "cron"),
        ({"cron": "0 0 31 2 *"}, InvalidArgument, "cron"),
        ({"cron": "*/5 * * * *", "timezone": "Mars/Olympus_Mons"}, InvalidArgument, "timezone"),
        ({"cron": "*/5 * * * *", "timezone": "../../etc/passwd"}, InvalidArgument, "timezone"),
        ({"cron": "*/5 * * * *", "timezone": "localtime"}, InvalidArgument, "timezone"),
        ({"cron": "*/5 * * * *", "timezone": "posixrules"}, InvalidArgument, "timezone"),
        ({"cron": "*/5 * * * *", "timezone": "right/UTC"}, InvalidArgument, "timezone"),
        ({"cron": "*/5 * * * *", "timezone": "posix/Europe/Paris"}, InvalidArgument, "timezone"),
        ({"every": 10, "timezone": "localtime"}, InvalidArgument, "timezone"),
        ({"every": timedelta(0)}, InvalidArgument, "every"),
        ({"every": -5}, InvalidArgument, "every"),
        ({"every": float("nan")}, InvalidArgument, "every"),
        ({"every": 0.5}, InvalidArgument, "every"),
        ({"every": "10s"}, InvalidArgument, "every"),
        ({"every": 10, "cron": "* * * * *"}, InvalidArgument, "every"),
        ({}, InvalidArgument, "cron"),
        ({"every": 10, "payload": {"when": datetime.now()}}, PayloadError, "payload"),
        ({"every": 10, "payload": {"x": float("inf")}}, PayloadError, "payload"),
        ({"every": 10, "payload": "a\x00b"}, PayloadError, "payload"),
        ({"every": 10, "catch_up": 0}, InvalidArgument, "catch_up"),
        ({"every": 10, "max_attempts": 0}, InvalidArgument, "max_attempts"),
        ({"every": 10, "channel": " "}, InvalidArgument, "channel"),
        ({"every": 10, "name": ""}, InvalidArgument, "name"),
    ],
    ids=lambda v: repr(v)[:40] if not isinstance(v, type) else v.__name__,
)
def test_bad_input_is_refused_at_declaration(declared, conn, options, error, field):
    before = schedules.declarations()
    queue = options.pop("queue", QUEUE)
    with pytest.raises(error) as raised:
        periodic(queue=queue, **{"name": "bad", **options})(target)
    assert raised.value.field == field
    assert field in str(raised.value)
    assert schedules.declarations() == before
    sync(conn, [])
    assert conn.execute("SELECT count(*) FROM lonnymq_schedule").fetchone()[0] == 0


def test_a_name_used_twice_is_refused_and_the_first_stays(declared):
    periodic(every=10, queue=QUEUE, name="twice")(target)
    with pytest.raises(InvalidArgument, match="used by two schedules") as raised:
        periodic(every=20, queue=QUEUE, name="twice")(target)
    assert raised.value.field == "name"
    assert only(schedules.declarations(), "twice")[0].timing.every_ms == 10_000
    # The same declaration imported again (a module reloaded) is not a second one.
    periodic(every=10, queue=QUEUE, name="twice")(target)


def test_a_queue_is_required_for_a_plain_function(declared):
    with pytest.raises(InvalidArgument, match="queue must be given"):
        periodic(every=10, name="no-queue")(target)


def test_the_default_name_is_the_functions_dotted_path(declared):
    periodic("0 7 * * *", queue=QUEUE)(target)
    names = [d.name for d in schedules.declarations()]
    assert f"{__name__}.target" in names


# ---------------------------------------------------------------------------------------
# Sync
# ---------------------------------------------------------------------------------------


def test_sync_adds_changes_keeps_and_removes(declared, conn):
    periodic(every=60, queue=QUEUE, name="a")(target)
    periodic("0 7 * * *", queue=QUEUE, name="b", payload={"kind": "daily"}, timezone="Europe/Paris")(target)
    mine = lambda: only(schedules.declarations(), "a", "b")  # noqa: E731
    assert sync(conn, mine()) == schedules.SyncResult(added=2, changed=0, removed=0)
    b = Schedule.objects.get(name="b")
    assert b.cron == "0 7 * * *" and b.timezone == "Europe/Paris" and b.payload == {"kind": "daily"}
    assert b.from_code and b.enabled
    assert datetime.fromtimestamp(b.next_tick_at / 1000, ZoneInfo("Europe/Paris")).hour == 7

    # An operator's edit of a declared schedule stays while the code declares the same thing.
    Schedule.objects.filter(name="b").update(payload={"kind": "edited"}, enabled=False, next_tick_at=123)
    assert sync(conn, mine()) == schedules.SyncResult(added=0, changed=0, removed=0)
    b = Schedule.objects.get(name="b")
    assert b.payload == {"kind": "edited"} and not b.enabled and b.next_tick_at == 123

    # A changed declaration replaces the definition and its next tick; the pause stays.
    schedules.forget("b")
    periodic("0 8 * * *", queue=QUEUE, name="b", payload={"kind": "daily"}, timezone="Europe/Paris")(target)
    assert sync(conn, mine()) == schedules.SyncResult(added=0, changed=1, removed=0)
    b = Schedule.objects.get(name="b")
    assert b.cron == "0 8 * * *" and b.payload == {"kind": "daily"} and not b.enabled
    assert datetime.fromtimestamp(b.next_tick_at / 1000, ZoneInfo("Europe/Paris")).hour == 8

    # A schedule added in the database is left alone; a declaration no longer made is removed.
    Schedule.objects.create(name="tenant-42", queue=QUEUE, channel="42", every_ms=3_600_000, next_tick_at=1)
    assert sync(conn, only(schedules.declarations(), "b")) == schedules.SyncResult(0, 0, 1)
    assert sorted(Schedule.objects.values_list("name", flat=True)) == ["b", "tenant-42"]


def test_a_worker_deletes_only_the_declared_rows_of_its_queues(declared, conn):
    """Workers whose code declares different schedules (other handler modules) do not undo
    each other's: a row of a queue the syncing worker does not serve stays."""
    periodic(every=60, queue=QUEUE, name="mine")(target)
    periodic(every=60, queue="p_other", name="theirs")(target)
    assert sync(conn, only(schedules.declarations(), "mine", "theirs")).added == 2
    # A worker of QUEUE whose code declares neither: it removes its own queue's row only.
    assert sync(conn, [], queues=[QUEUE]) == schedules.SyncResult(0, 0, 1)
    assert list(Schedule.objects.values_list("name", flat=True)) == ["theirs"]
    # Its new declarations of any queue are still written.
    assert sync(conn, only(schedules.declarations(), "mine"), queues=["p_unrelated"]).added == 1
    assert sorted(Schedule.objects.values_list("name", flat=True)) == ["mine", "theirs"]


def test_concurrent_syncs_agree(declared, connect):
    periodic(every=60, queue=QUEUE, name="one")(target)
    found = only(schedules.declarations(), "one")
    first, second = connect(autocommit=False), connect()
    first.execute("BEGIN")
    sync_first = sync(first, found)  # inside first's open transaction: holds the sync lock
    import threading

    result: dict[str, object] = {}
    thread = threading.Thread(target=lambda: result.setdefault("second", sync(second, found)))
    thread.start()
    thread.join(0.5)
    assert thread.is_alive(), "the second sync waits for the first"
    first.commit()
    thread.join(10)
    assert sync_first.added == 1 and result["second"] == schedules.SyncResult(0, 0, 0)


# ---------------------------------------------------------------------------------------
# Ticks
# ---------------------------------------------------------------------------------------


def _declare_and_sync(conn, name: str, **options) -> Schedule:
    periodic(queue=QUEUE, name=name, **options)(target)
    sync(conn, only(schedules.declarations(), name), queues=[])  # adds it, removes nothing
    return Schedule.objects.get(name=name)


def test_a_due_tick_is_enqueued_once_with_its_time_and_the_next_tick_written(declared, conn):
    schedule = _declare_and_sync(conn, "every10", every=10, payload={"report": "x"})
    first = schedule.next_tick_at
    assert first % 10_000 == 0
    assert tick(conn, [QUEUE], now_ms=first - 1) == 0
    assert tick(conn, [QUEUE], now_ms=first + 500) == 1
    assert tick(conn, [QUEUE], now_ms=first + 500) == 0  # next tick not due yet
    [(message_id, key, dequeue_at, payload)] = messages(conn)
    assert key == f"lonnymq.periodic:{schedule.id}:{first}" and dequeue_at == first
    assert payload == {"report": "x"}
    assert schedules.tick_of(key) == datetime.fromtimestamp(first / 1000, UTC)
    schedule.refresh_from_db()
    assert schedule.next_tick_at == first + 10_000
    assert schedule.last_tick_at == first and schedule.last_message_id == message_id
    # Only the schedule's queue's workers tick it.
    conn.execute("UPDATE lonnymq_schedule SET next_tick_at = %s", [first])
    assert tick(conn, ["other"], now_ms=first + 500) == 0


def test_a_tick_fired_again_is_not_enqueued_twice(declared, conn):
    """Even a second fire of the same tick (the next tick put back by hand) finds its dedup key."""
    schedule = _declare_and_sync(conn, "again", every=10)
    first = schedule.next_tick_at
    tick(conn, [QUEUE], now_ms=first)
    conn.execute("UPDATE lonnymq_schedule SET next_tick_at = %s", [first])
    tick(conn, [QUEUE], now_ms=first)
    assert len(messages(conn)) == 1


def test_missed_ticks_collapse_to_the_latest_by_default(declared, conn):
    schedule = _declare_and_sync(conn, "collapse", every=10)
    first = schedule.next_tick_at
    tick(conn, [QUEUE], now_ms=first + 95_000)  # ten ticks due
    assert [m[2] for m in messages(conn)] == [first + 90_000]
    schedule.refresh_from_db()
    assert schedule.next_tick_at == first + 100_000


def test_catch_up_enqueues_each_missed_tick_up_to_the_bound(declared, conn):
    bounded = _declare_and_sync(conn, "bounded", every=10, catch_up=4, channel="bounded")
    first = bounded.next_tick_at
    tick(conn, [QUEUE], now_ms=first + 95_000)
    assert [m[2] for m in messages(conn)] == [first + t * 10_000 for t in (6, 7, 8, 9)]
    everything = _declare_and_sync(conn, "everything", cron="*/5 * * * *", catch_up=1000, channel="all")
    start = everything.next_tick_at
    tick(conn, [QUEUE], now_ms=start + 3_600_000)
    keys = [m[1] for m in messages(conn) if m[1].startswith(f"lonnymq.periodic:{everything.id}:")]
    assert len(keys) == 13 and len(set(keys)) == 13  # every 5 minutes over an hour, both ends


def test_two_connections_never_fire_one_tick_twice(declared, connect):
    """A claimed row is skipped by the other connection (SKIP LOCKED), which does not wait."""
    conn = connect()
    schedule = _declare_and_sync(conn, "contended", every=10)
    first = schedule.next_tick_at
    holder = connect(autocommit=False)
    rows = holder.execute(
        sql.query("claim_schedules"), {"queues": [QUEUE], "now_ms": first, "limit": 10}
    ).fetchall()
    assert len(rows) == 1
    assert tick(conn, [QUEUE], now_ms=first) == 0  # skipped at once, not waited for
    holder.rollback()
    assert tick(conn, [QUEUE], now_ms=first) == 1
    assert len(messages(conn)) == 1


def test_a_paused_schedule_does_not_tick(declared, conn):
    schedule = _declare_and_sync(conn, "paused", every=10)
    Schedule.objects.filter(pk=schedule.pk).update(enabled=False)
    assert tick(conn, [QUEUE], now_ms=schedule.next_tick_at + 60_000) == 0
    assert messages(conn) == []


def test_a_row_with_a_timing_that_cannot_be_computed_is_parked_with_its_error(declared, conn):
    """Written around the checks (raw SQL): the tick neither raises nor loops; the row keeps
    the error and waits for an operator (next_tick_at NULL)."""
    conn.execute(
        "INSERT INTO lonnymq_schedule (name, queue, cron, timezone, next_tick_at)"
        " VALUES ('broken', %s, '0 7 * * *', 'Mars/Olympus_Mons', 1000)",
        [QUEUE],
    )
    assert tick(conn, [QUEUE], now_ms=5000) == 1
    row = Schedule.objects.get(name="broken")
    assert row.next_tick_at is None and "timezone" in row.last_error
    assert tick(conn, [QUEUE], now_ms=10_000) == 0
    assert messages(conn) == []


# ---------------------------------------------------------------------------------------
# Daylight saving time (America/New_York: 2026-03-08 skips 02:00-03:00, 2026-11-01 repeats
# 01:00-02:00). The rule (Debian cron's, as cronsim computes it): a job at a time the clock
# skips runs once, right after the jump; a job at a repeated time runs once, at its first
# occurrence. Jobs with a wildcard hour run at every hour that exists.
# ---------------------------------------------------------------------------------------


def _run_day(
    conn, schedule: Schedule, day: datetime, step: timedelta = timedelta(minutes=7)
) -> list[datetime]:
    """Tick every ``step`` through ``day`` (local) with the clock given; the ticks enqueued."""
    Schedule.objects.filter(pk=schedule.pk).update(
        next_tick_at=schedules.first_tick(schedule.cron, schedule.every_ms, schedule.timezone, ms(day) - 1)
    )
    moment = day
    while moment < day + timedelta(days=1):
        tick(conn, [QUEUE], now_ms=ms(moment))
        moment += step
    keys = [m[1] for m in messages(conn) if m[1].startswith(f"lonnymq.periodic:{schedule.id}:")]
    return [schedules.tick_of(k).astimezone(NEW_YORK) for k in keys]


@pytest.mark.parametrize(
    ("cron", "day", "expected"),
    [
        ("30 2 * * *", datetime(2026, 3, 8, tzinfo=NEW_YORK), ["2026-03-08T03:00:00-04:00"]),
        ("30 2 * * *", datetime(2026, 11, 1, tzinfo=NEW_YORK), ["2026-11-01T02:30:00-05:00"]),
        ("30 1 * * *", datetime(2026, 11, 1, tzinfo=NEW_YORK), ["2026-11-01T01:30:00-04:00"]),
        ("30 1 * * *", datetime(2026, 3, 8, tzinfo=NEW_YORK), ["2026-03-08T01:30:00-05:00"]),
    ],
    ids=["02:30-skipped-day", "02:30-repeat-day", "01:30-repeated-hour", "01:30-skip-day"],
)
def test_a_daily_schedule_ticks_once_on_dst_days(declared, conn, cron, day, expected):
    schedule = _declare_and_sync(conn, "dst", cron=cron, timezone="America/New_York", catch_up=10)
    assert [t.isoformat() for t in _run_day(conn, schedule, day)] == expected


def test_a_wildcard_hour_ticks_at_each_hour_that_exists(declared, conn):
    schedule = _declare_and_sync(conn, "hourly", cron="30 * * * *", timezone="America/New_York", catch_up=10)
    skipped = _run_day(conn, schedule, datetime(2026, 3, 8, tzinfo=NEW_YORK))
    assert len(skipped) == 23  # no 02:30 that day
    conn.execute("DELETE FROM lonnymq_message")
    conn.execute("DELETE FROM lonnymq_dedup")
    repeated = _run_day(conn, schedule, datetime(2026, 11, 1, tzinfo=NEW_YORK))
    assert len(repeated) == 25  # 01:30 EDT and 01:30 EST
    assert len({t.timestamp() for t in repeated}) == 25


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_nothing_planted_runs_through_periodic_schedules(declared, attacker, connect):
    """The attacker of test_search_path_attack plants look-alikes of every built-in the live
    SQL calls, of the operators, and narrower overloads of the app's functions; syncing,
    claiming, firing and removing schedules must run none of them."""
    conn = connect()
    periodic(every=10, queue=QUEUE, name="attack-a", payload={"n": 1}, catch_up=3)(target)
    periodic("*/5 * * * *", queue=QUEUE, name="attack-b", timezone="Europe/Paris")(target)
    assert sync(conn, only(schedules.declarations(), "attack-a", "attack-b")).added == 2
    a = Schedule.objects.get(name="attack-a")
    first = a.next_tick_at
    assert tick(conn, [QUEUE], now_ms=first + 25_000) >= 1
    of_a = [m[2] for m in messages(conn) if m[1].startswith(f"lonnymq.periodic:{a.id}:")]
    assert of_a == [first, first + 10_000, first + 20_000]
    conn.execute("UPDATE lonnymq_schedule SET timezone = 'Nowhere/Else' WHERE name = 'attack-b'")
    b = Schedule.objects.get(name="attack-b")
    tick(conn, [QUEUE], now_ms=b.next_tick_at)  # parks it with its error
    assert Schedule.objects.get(name="attack-b").last_error
    assert sync(conn, only(schedules.declarations(), "attack-a")).removed == 1


def test_a_schedule_whose_enqueue_fails_is_parked_and_the_others_still_tick(declared, conn):
    """A tick the database refuses (here a trigger on the message table rejects channel
    'poison') parks that schedule with the error; the others of the batch are fired."""
    poison = _declare_and_sync(conn, "poisoned", every=10, channel="poison")
    healthy = _declare_and_sync(conn, "healthy", every=10, channel="fine")
    conn.execute(
        "CREATE FUNCTION test_refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " IF (SELECT name FROM lonnymq_channel WHERE id = NEW.channel_id) = 'poison' THEN"
        " RAISE EXCEPTION 'poison refused'; END IF; RETURN NEW; END $$"
    )
    conn.execute(
        "CREATE TRIGGER test_refuse_poison BEFORE INSERT ON lonnymq_message"
        " FOR EACH ROW EXECUTE FUNCTION test_refuse_poison()"
    )
    try:
        assert tick(conn, [QUEUE], now_ms=max(poison.next_tick_at, healthy.next_tick_at)) == 2
    finally:
        conn.execute("DROP TRIGGER test_refuse_poison ON lonnymq_message")
        conn.execute("DROP FUNCTION test_refuse_poison()")
    poison.refresh_from_db()
    healthy.refresh_from_db()
    assert poison.next_tick_at is None and "poison refused" in poison.last_error
    assert healthy.last_tick_at is not None and healthy.last_error is None
    assert [m[1] for m in messages(conn)] == [f"lonnymq.periodic:{healthy.id}:{healthy.last_tick_at}"]


# ---------------------------------------------------------------------------------------
# Bounded cron walks. cronsim walks back forever across Greenland's clock change of
# 2026-03-28 (the local hour 23:00-24:00 of that day does not exist): a tick check must give
# that schedule up at once, with the reason on its row, and tick the others of its batch.
# ---------------------------------------------------------------------------------------

GREENLAND = ["America/Nuuk", "America/Godthab", "America/Scoresbysund"]


def _tick_or_fail(conn: psycopg.Connection, connect, now_ms: int, seconds: float = 20.0) -> int:
    """``tick()`` in a thread: a check that does not return within ``seconds`` fails the test
    (its session is ended, so its locks go) instead of hanging the suite."""
    import threading

    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["claimed"] = tick(conn, [QUEUE], now_ms=now_ms)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        connect().execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
        pytest.fail(f"the tick check did not return within {seconds:.0f} s")
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return int(result["claimed"])  # type: ignore[call-overload]


@pytest.mark.parametrize("zone", GREENLAND)
@pytest.mark.parametrize("case", ["catch-up-2-at-the-april-tick", "catch-up-1-after-downtime"])
def test_a_cron_walk_that_does_not_end_fails_its_schedule_alone(conn, connect, admin_client, zone, case):
    local = ZoneInfo(zone)
    if case == "catch-up-2-at-the-april-tick":
        # The 2026-04-28 00:00 tick of `0 * 28 * *`: finding the tick before it walks back
        # into 2026-03-28.
        first, now, catch_up = ms(datetime(2026, 4, 28, tzinfo=local)), None, 2
        now = first + 10_000
    else:
        # The 22:00 tick of 2026-03-28 (the last that day) missed: the worker is back the next
        # morning.
        first = ms(datetime(2026, 3, 28, 22, tzinfo=local))
        now, catch_up = ms(datetime(2026, 3, 29, 9, tzinfo=local)), 1
    stuck = Schedule.objects.create(
        name="greenland", queue=QUEUE, channel="nuuk", cron="0 * 28 * *", timezone=zone,
        catch_up=catch_up, next_tick_at=first,
    )  # fmt: skip
    # Due after the stuck one, so it comes later in the same batch.
    healthy = Schedule.objects.create(
        name="healthy", queue=QUEUE, channel="fine", every_ms=10_000, next_tick_at=now - now % 10_000
    )
    # The walk is bounded by its steps, not by the clock (a wall-clock bound failed on a loaded
    # machine): the parked schedule's error names the step bound it hit.
    assert _tick_or_fail(conn, connect, now) == 2

    stuck.refresh_from_db()
    healthy.refresh_from_db()
    assert stuck.next_tick_at is None and stuck.enabled  # parked, not paused
    assert stuck.last_error.startswith("cron could not be computed"), stuck.last_error
    assert zone in stuck.last_error and "steps" in stuck.last_error
    assert healthy.last_error is None and healthy.last_tick_at == now - now % 10_000
    assert [m[1] for m in messages(conn)] == [f"lonnymq.periodic:{healthy.id}:{healthy.last_tick_at}"]
    # Nothing stays locked: the next check claims nothing of it, at once.
    assert _tick_or_fail(conn, connect, now) == 0
    # The operator sees why, on the list and on the schedule's page.
    from django.urls import reverse

    listing = admin_client.get(reverse("admin:django_lonnymq_schedule_changelist")).content.decode()
    assert "cron could not be computed" in listing
    page = admin_client.get(reverse("admin:django_lonnymq_schedule_change", args=[stuck.pk])).content
    assert zone in page.decode() and "steps" in page.decode()


def test_a_tick_check_computes_for_a_bounded_time_and_leaves_the_rest_due(declared, conn):
    """Past its time budget a check starts no more computations (the first is always made):
    the rest of the batch stays due, unlocked, for the next check."""
    for n in range(3):
        Schedule.objects.create(
            name=f"b{n}", queue=QUEUE, channel=f"c{n}", every_ms=10_000, next_tick_at=10_000
        )
    assert tick(conn, [QUEUE], now_ms=20_000, budget=0.0) == 1
    assert Schedule.objects.filter(next_tick_at=10_000).count() == 2
    assert tick(conn, [QUEUE], now_ms=20_000, budget=0.0) == 1
    assert tick(conn, [QUEUE], now_ms=20_000) == 1
    assert len(messages(conn)) == 3


def test_the_ticker_checks_again_at_once_when_a_check_was_cut_short(conn):
    for n in range(3):
        Schedule.objects.create(
            name=f"t{n}", queue=QUEUE, channel=f"c{n}", every_ms=3_600_000, next_tick_at=3_600_000
        )
    ticker = schedules.Ticker([QUEUE], interval=3600, budget=0.0)
    ticker.synced = True  # this test's rows only
    for done in (1, 2, 3):
        ticker.run(conn)
        assert Schedule.objects.exclude(next_tick_at=3_600_000).count() == done
        if done < 3:  # schedules were left due: the next check is now
            assert ticker._next_at <= time.monotonic()
    # Nothing was left: the next check is an interval away.
    assert ticker._next_at > time.monotonic() + 3000
    assert len(messages(conn)) == 3


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"every": 10**400}, "every"),
        ({"every": -(10**400)}, "every"),
        ({"every": 10**5000}, "every"),
        ({"every": 10, "catch_up": 10**5000}, "catch_up"),
        ({"every": 10, "max_attempts": 10**5000}, "max_attempts"),
    ],
    ids=["every-10**400", "every--10**400", "every-10**5000", "catch_up-10**5000", "max_attempts-10**5000"],
)
def test_huge_numbers_are_refused_at_declaration(declared, options, field):
    """Past a float's range, or past Python's 4,300-digit limit for printing an int: still
    InvalidArgument naming the field and the rule, nothing registered."""
    before = schedules.declarations()
    with pytest.raises(InvalidArgument) as raised:
        periodic(queue=QUEUE, name="huge", **options)(target)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field} must be between")
    assert schedules.declarations() == before


@pytest.mark.parametrize("zone", ["localtime", "posixrules", "right/Europe/Paris"])
def test_a_row_with_a_host_zone_file_is_parked_with_the_reason(declared, conn, zone):
    """Written before zones were checked against the IANA names (or around the checks): its
    meaning would depend on the host, so a check parks it rather than tick on the host's time."""
    conn.execute(
        "INSERT INTO lonnymq_schedule (name, queue, cron, timezone, next_tick_at)"
        " VALUES ('host-zone', %s, '0 7 * * *', %s, 1000)",
        [QUEUE, zone],
    )
    assert tick(conn, [QUEUE], now_ms=5000) == 1
    row = Schedule.objects.get(name="host-zone")
    assert row.next_tick_at is None and row.last_error.startswith("timezone must be")
    assert "IANA time zone name" in row.last_error and zone in row.last_error
    assert messages(conn) == []
