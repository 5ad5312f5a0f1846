"""Durable handlers in eager mode and against the SQL functions: steps checkpoint with their
writes, a failing step rolls its writes back, sleeps go on at once (or suspend under
eager_sleeps), waits resume on an emit, and bad input is refused before anything is written."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction

from django_lonnymq import Message, api, enqueue, handler
from django_lonnymq.exceptions import InvalidArgument, NotInHandler, PayloadError
from django_lonnymq.models import Channel, DeadMessage
from django_lonnymq.models import Message as MessageRow
from django_lonnymq.registry import unregister
from django_lonnymq.testing import eager, eager_sleeps, resume

pytestmark = pytest.mark.django_db
ran: list[tuple[int, str]] = []


def _mark(name: str) -> str:
    """A step's own ORM write: a channel row named after it."""
    Channel.objects.create(queue="durable_seen", name=name)
    return name


def _marks() -> list[str]:
    return sorted(Channel.objects.filter(queue="durable_seen").values_list("name", flat=True))


def _steps(message_id: int) -> list[tuple[str, str, bool]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, kind, done FROM lonnymq_step WHERE message_id = %s ORDER BY created_at",
            [message_id],
        )
        return list(cursor.fetchall())


@pytest.fixture
def queue():
    ran.clear()
    names = []

    def register(name, fn):
        names.append(name)
        handler(name)(fn)

    yield register
    for name in names:
        unregister(name)


def test_a_step_whose_fn_raises_rolls_its_writes_back_and_runs_again_on_the_retry(queue):
    def flaky(message: Message) -> None:
        ran.append((message.attempt, "run"))
        message.step("one", _mark, "one")

        def two() -> str:
            _mark(f"two-{message.attempt}")
            if message.attempt == 1:
                raise RuntimeError("the card was declined")
            return "two"

        assert message.step("two", two) == "two"

    queue("d_flaky", flaky)
    with eager():
        msg = enqueue("d_flaky", {})
    assert ran == [(1, "run"), (2, "run")]
    assert _marks() == ["one", "two-2"]  # "one" once; the first "two" rolled back with its raise
    assert not MessageRow.objects.filter(id=msg).exists()
    assert _steps(msg) == [("one", "step", True), ("two", "step", True)]


def test_a_stored_result_comes_back_without_calling_fn_and_names_are_unique_per_run(queue):
    calls = []

    def twice(message: Message) -> None:
        got = message.step("quote", lambda: calls.append(1) or {"price": 3, "items": (1, 2)})
        ran.append((message.attempt, got))
        if message.attempt == 1:
            raise RuntimeError("later failure")

    queue("d_twice", twice)
    with eager():
        enqueue("d_twice", {})
    assert calls == [1]
    assert ran == [(1, {"price": 3, "items": [1, 2]}), (2, {"price": 3, "items": [1, 2]})]

    def duplicate(message: Message) -> None:
        message.step("same", _mark, "a")
        message.step("same", _mark, "b")

    queue("d_dup", duplicate)
    with eager():
        msg = enqueue("d_dup", {}, max_attempts=1)
    [dead] = DeadMessage.objects.filter(id=msg)
    assert "DuplicateStep" in dead.last_error and "'same' was already used" in dead.last_error


def test_a_sleep_goes_on_at_once_in_eager_mode_unless_the_test_asks(queue):
    def sleeper(message: Message) -> None:
        message.step("before", _mark, "before")
        message.sleep("nap", timedelta(hours=24))
        message.step("after", _mark, "after")

    queue("d_sleep", sleeper)
    with eager():
        first = enqueue("d_sleep", {})
    assert _marks() == ["after", "before"] and not MessageRow.objects.filter(id=first).exists()

    Channel.objects.filter(queue="durable_seen").delete()
    with eager(), eager_sleeps():
        msg = enqueue("d_sleep", {})
        row = MessageRow.objects.get(id=msg)
        assert _marks() == ["before"] and row.lease_until is None and row.attempts == 0  # suspended
        assert _steps(msg) == [("before", "step", True), ("nap", "sleep", False)]
        assert api.suspended_counts() == {"d_sleep": 1}
        assert resume(msg) == [msg]
    assert _marks() == ["after", "before"] and not MessageRow.objects.filter(id=msg).exists()


def test_a_wait_resumes_when_the_test_emits_and_a_rolled_back_emit_resumes_nothing(queue):
    def approval(message: Message) -> None:
        got = message.wait("approval", f"order-{message.payload['order']}", timeout=3600)
        ran.append((message.id, repr(got)))

    queue("d_wait", approval)
    with eager():
        msg = enqueue("d_wait", {"order": 7})
        assert ran == [] and MessageRow.objects.filter(id=msg).exists()
        with pytest.raises(RuntimeError), transaction.atomic():
            api.emit_event("order-7", {"approved": True})
            raise RuntimeError("rolled back")
        assert ran == []
        assert api.emit_event("order-7", {"approved": True}) is True
        assert ran == [(msg, "{'approved': True}")]
        assert api.emit_event("order-7", {"approved": False}) is False  # first write wins
        # Emitted first, waited for later: the kept event answers at once.
        other = enqueue("d_wait", {"order": 7})
        assert ran[-1] == (other, "{'approved': True}")
        # Resumed before its event: the wait returns None, as on a timeout.
        late = enqueue("d_wait", {"order": 8})
        resume(late)
        assert ran[-1] == (late, "None")


def test_async_handlers_get_astep_asleep_and_await_event(queue):
    async def flow(message: Message) -> None:
        got = await message.astep("one", _mark, "one")
        await message.asleep("nap", 1)
        event = await message.await_event("go", "async-go")
        ran.append((message.id, f"{got}:{event}"))

    queue("d_async", flow)
    with eager():
        msg = enqueue("d_async", {})
        assert ran == []
        async_to_sync(api.aemit_event)("async-go", "yes")
    assert ran == [(msg, "one:yes")] and _marks() == ["one"]


def test_step_outside_a_handler_is_refused():
    message = Message(id=1, queue="q", channel="c", payload={}, attempt=1, max_attempts=1, enqueued_at=None)
    with pytest.raises(NotInHandler):
        message.step("one", _mark, "one")
    with pytest.raises(NotInHandler):
        message.sleep("nap", 1)
    assert _marks() == []


BAD_STEPS = [
    ("name", "", "must be 1 to 200 characters"),
    ("name", 7, "must be a string"),
    ("name", "x" * 201, "must be 1 to 200 characters"),
]


@pytest.mark.parametrize(("field", "value", "rule"), BAD_STEPS)
def test_bad_step_names_are_refused_before_anything_is_written(queue, field, value, rule):
    errors = []

    def bad(message: Message) -> None:
        try:
            message.step(value, _mark, "written")
        except InvalidArgument as exc:
            errors.append(exc)

    queue("d_bad", bad)
    with eager():
        msg = enqueue("d_bad", {})
    [exc] = errors
    assert (exc.field, exc.rule) == (field, rule) and exc.value == value
    assert _marks() == [] and _steps(msg) == []


@pytest.mark.parametrize(
    ("result", "error"),
    [
        (object(), PayloadError),
        (math.nan, PayloadError),
        ("a\x00b", PayloadError),
        ("x" * 200_000, PayloadError),
    ],
)
def test_a_result_that_is_not_json_or_too_large_rolls_the_step_back(queue, result, error):
    errors = []

    def bad(message: Message) -> None:
        try:
            message.step("r", lambda: _mark("written") and result)
        except InvalidArgument as exc:
            errors.append(exc)

    queue("d_bad_result", bad)
    with eager():
        msg = enqueue("d_bad_result", {})
    [exc] = errors
    assert isinstance(exc, error) and exc.field == "result"
    assert _marks() == [] and _steps(msg) == []


@pytest.mark.parametrize(
    ("call", "field", "rule"),
    [
        (lambda m: m.sleep("s", -1), "delay", "must not be negative"),
        (lambda m: m.sleep("s", math.nan), "delay", "must be finite"),
        (lambda m: m.sleep("s", timedelta(days=400)), "delay", "must be at most 366 days"),
        (lambda m: m.wait("w", "k", timeout=math.nan), "timeout", "must be finite"),
        (lambda m: m.wait("w", "k", timeout=-1), "timeout", "must not be negative"),
        (lambda m: m.wait("w", "", timeout=1), "key", "must be 1 to 200 characters, not only blanks"),
        (lambda m: m.wait("w", 5), "key", "must be a string"),
    ],
)
def test_bad_sleeps_and_waits_are_refused_and_write_nothing(queue, call, field, rule):
    errors = []

    def bad(message: Message) -> None:
        try:
            call(message)
        except InvalidArgument as exc:
            errors.append(exc)

    queue("d_bad_pause", bad)
    with eager():
        msg = enqueue("d_bad_pause", {})
    [exc] = errors
    assert (exc.field, exc.rule) == (field, rule)
    assert _steps(msg) == [] and not MessageRow.objects.filter(id=msg).exists()


@pytest.mark.parametrize(
    ("key", "payload", "field"),
    [("", None, "key"), (None, None, "key"), ("k" * 201, None, "key"), ("k", math.nan, "payload"),
     ("k", {1: object()}, "payload"), ("k", "x" * 200_000, "payload")],
)  # fmt: skip
def test_bad_emits_are_refused_and_write_nothing(key, payload, field):
    with pytest.raises(InvalidArgument) as caught:
        api.emit_event(key, payload)
    assert caught.value.field == field
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM lonnymq_event")
        assert cursor.fetchone()[0] == 0


def test_the_schema_refuses_what_python_would(queue):
    for statement, constraint in [
        ("INSERT INTO lonnymq_step (message_id, name, kind, done) VALUES (1, '', 'step', true)", "lonnymq_step_name_length"),
        ("INSERT INTO lonnymq_step (message_id, name, kind, done) VALUES (1, 'w', 'wait', false)", "lonnymq_step_wait_has_key"),
        ("INSERT INTO lonnymq_step (message_id, name, kind, done) VALUES (1, 's', 'step', false)", "lonnymq_step_done_when_step"),
        ("INSERT INTO lonnymq_event (key, payload) VALUES ('', 'null')", "lonnymq_event_key_length"),
    ]:  # fmt: skip
        with pytest.raises(Exception, match=constraint), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement)


def test_housekeeping_prunes_old_events_and_the_checkpoints_of_messages_that_are_gone(queue):
    from django_lonnymq import db

    def one_step(message: Message) -> None:
        message.step("one", _mark, f"one-{message.id}")
        if message.payload.get("fail"):
            raise RuntimeError("dead")

    queue("d_prune", one_step)
    with eager():
        acked = enqueue("d_prune", {})
        dead = enqueue("d_prune", {"fail": True}, max_attempts=1)
    api.emit_event("old", 1)
    api.emit_event("new", 2)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE lonnymq_event SET emitted_at = now() - interval '8 days' WHERE key = 'old'")
    pruned = db.value("durable_prune", {"event_retention_ms": 7 * 86_400_000, "limit": 100})
    assert pruned == 2  # the old event, the acked message's checkpoint
    with connection.cursor() as cursor:
        cursor.execute("SELECT key FROM lonnymq_event ORDER BY key")
        assert cursor.fetchall() == [("new",)]
    assert _steps(acked) == [] and _steps(dead) == [("one", "step", True)]  # a requeue keeps it
    assert api.suspended_counts() == {}


def test_a_suspended_message_can_be_cancelled_and_forget_steps_runs_them_again(queue):
    def approval(message: Message) -> None:
        message.step("one", _mark, f"one-{message.id}-{len(_marks())}")
        message.wait("approval", f"cancel-{message.id}")

    queue("d_cancel", approval)
    with eager():
        msg = enqueue("d_cancel", {})
        assert MessageRow.objects.filter(id=msg).exists() and len(_marks()) == 1
        assert api.forget_steps(msg, "one") == ["one", "approval"]
        with pytest.raises(InvalidArgument, match="names no checkpoint"), transaction.atomic():
            api.forget_steps(msg, "nothing")
        resume(msg)  # runs again from the top: step "one" again, then waits again
        assert len(_marks()) == 2 and _steps(msg) == [("one", "step", True), ("approval", "wait", False)]
        assert api.cancel([msg]) == [msg]
    assert not MessageRow.objects.filter(id=msg).exists() and not DeadMessage.objects.filter(id=msg).exists()
    assert api.suspended_counts() == {}
