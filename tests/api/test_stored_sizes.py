"""What a handler's run leaves that PostgreSQL could refuse: an error text with a NUL or a
lone surrogate is stored escaped (the real error kept, the outcome recorded at once), and a
step output is checked in Python as the database checks it (its stored jsonb size); a bad
outcome fails its own message alone, never the batch it was acked with."""

from __future__ import annotations

import json
import random
import threading

import pytest
from django.db import connection
from django.test import override_settings

from django_lonnymq import Discard, Message, Workflow, api, enqueue, handler
from django_lonnymq.exceptions import PayloadError
from django_lonnymq.jsontext import jsonb_size
from django_lonnymq.models import DeadMessage
from django_lonnymq.testing import drain, eager
from django_lonnymq.worker.completion import Completion
from django_lonnymq.worker.connection import ControlConnection
from django_lonnymq.worker.held import Held
from django_lonnymq.worker.lifecycle import workflow_inputs
from django_lonnymq.worker.observer import Observers
from django_lonnymq.worker.outcomes import Outcome, message_from_row
from django_lonnymq.worker.stats import Stats
from django_lonnymq.worker.waiting import Waiter

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


def test_in_eager_mode_the_same_reason_is_stored_escaped():
    with eager():
        message_id = enqueue("sz_bad_error", {"kind": "surrogate", "discard": True}, max_attempts=3)
    assert ran == [message_id]
    dead = DeadMessage.objects.get(id=message_id)
    assert (dead.reason, dead.last_error) == ("discarded", "lone\\ud800here")


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


NUMBERS = [
    "0", "-0", "1", "-1", "7", "10", "9999", "10000", "123456789", "1234567890123456789012345678901234567890",
    "0.5", "0.0001", "0.00001", "1.500", "-12.25", "0.000", "1e100", "1E-100", "1.5e+300", "2.5e-300",
    "1e252", "1e253", "1e-256", "1e-257", "0e10", "0.0e-80", "5e-324", "1.7976931348623157e+308",
    "100000000", "0.1234567890123456789", "-3.14159e-5", "1" + "0" * 300,
]  # fmt: skip


def random_json(rng, level: int = 0) -> str:
    kind = rng.random()
    if level < 4 and kind < 0.25:
        return "[" + ",".join(random_json(rng, level + 1) for _ in range(rng.randrange(0, 7))) + "]"
    if level < 4 and kind < 0.5:
        members = {}
        for _ in range(rng.randrange(0, 7)):
            key = "".join(rng.choice('ab\u00e9\u4e2d\U0001f600"\\') for _ in range(rng.randrange(0, 6)))
            members[json.dumps(key)] = random_json(rng, level + 1)  # repeated keys: the last wins
        pairs = list(members.items()) + (
            [(next(iter(members)), "1")] if members and rng.random() < 0.2 else []
        )
        return "{" + ",".join(f"{k}:{v}" for k, v in pairs) + "}"
    if kind < 0.75:
        return rng.choice(NUMBERS)
    if kind < 0.85:
        return rng.choice(["true", "false", "null"])
    return json.dumps(
        "".join(rng.choice("xy \u00e9\u4e2d\U0001f600\n\t") for _ in range(rng.randrange(0, 9)))
    )


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_the_python_measure_of_a_jsonb_value_is_what_postgresql_stores():
    rng = random.Random(20261128)
    texts = NUMBERS + [random_json(rng) for _ in range(3000)] + ["[" + ",".join(["1"] * 700_000) + "]"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_catalog.pg_column_size(t::jsonb) FROM unnest(%s::text[]) AS t", [texts])
        stored = [row[0] for row in cursor.fetchall()]
    measured = [jsonb_size(text) for text in texts]
    wrong = [(t[:80], s, m) for t, s, m in zip(texts, stored, measured, strict=True) if s != m]
    assert wrong == []
    # The bound the Python check relies on to skip measuring short texts.
    assert all(size <= 8 * len(text) + 16 for text, size in zip(texts, stored, strict=True))


BIG_OUTPUT = [1] * 700_000  # 1.4 MB as JSON, 8,400,008 bytes as jsonb: past the 8 MiB CHECK


@handler("sz_step")
def step(message: Message) -> object:
    ran.append(message.id)
    return BIG_OUTPUT if message.step_name == "big" else {"name": message.step_name}


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_a_step_output_the_database_would_refuse_fails_its_step_alone_and_the_others_go_on():
    flow = Workflow("sizes")
    flow.step("sz_step", {}, name="big", max_attempts=1)
    small = flow.step("sz_step", {}, name="small")
    flow.step("sz_step", {}, name="after", after=[small])
    with override_settings(LONNYMQ_MAX_PAYLOAD_BYTES=8_388_608):
        workflow_id = flow.start()
        stats = drain("sz_step", concurrency=2, batch_size=10)
    info = api.workflow(workflow_id)
    assert [info.step(n).state for n in ("big", "small", "after")] == ["dead", "succeeded", "succeeded"]
    assert info.step("after").output == {"name": "after"}
    dead = DeadMessage.objects.get(id=info.step("big").id)
    assert dead.reason == "failed"
    assert "output takes 8400008 bytes as stored by PostgreSQL" in dead.last_error, dead.last_error
    assert stats.acked == 2 and stats.dead == 1


def test_an_ack_batch_the_database_refuses_is_acked_step_by_step_and_the_bad_step_fails_alone():
    """The Python check is the first guard; the worker's ack is the second: an output that
    still reaches the database and is refused there fails its own step, the batch's other
    steps are acked, and the flush returns."""
    flow = Workflow("sizes")
    for name in ("a", "b", "c"):
        flow.step("sz_step", {}, name=name, max_attempts=1)
    workflow_id = flow.start()
    stats = Stats()
    connection_ = ControlConnection("default", "t-sizes", stats, threading.Event())
    assert connection_.ensure()
    try:
        rows = connection_.run(
            "dequeue",
            {"queue": "sz_step", "batch_size": 10, "lease_ms": 60_000, "worker": "t", "tolerance_ms": 0},
        )
        assert len(rows) == 3
        held = Held()
        completion = Completion(connection_, held, Observers(passes=connection_.is_lost), stats, Waiter())
        for row in rows:
            message = message_from_row("sz_step", row)
            workflow_inputs(message, row[10], row[11], row[12])
            held.add([message])
            too_big = message.step_name == "b"
            output = "[" + ",".join(["1"] * 700_000) + "]" if too_big else f'"{message.step_name}"'
            completion.post(Outcome(message, "ack", output=output))
        completion.flush()
    finally:
        connection_.close()
    info = api.workflow(workflow_id)
    assert [info.step(n).state for n in ("a", "b", "c")] == ["succeeded", "dead", "succeeded"]
    assert info.step("a").output == "a"
    dead = DeadMessage.objects.get(id=info.step("b").id)
    assert dead.reason == "failed"
    assert "the step's output could not be stored" in dead.last_error
    assert "lonnymq_workflow_step_output_size" in dead.last_error, dead.last_error
    assert stats.acked == 2 and stats.dead == 1


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_a_payload_past_the_stored_bound_is_refused_before_anything_is_written():
    with override_settings(LONNYMQ_MAX_PAYLOAD_BYTES=8_388_608):
        with pytest.raises(PayloadError) as raised:
            enqueue("sz_step", BIG_OUTPUT)
        enqueue("sz_step", [1] * 690_000)  # 8,280,008 bytes stored: within the bound
    assert raised.value.field == "payload"
    assert "payload takes 8400008 bytes as stored by PostgreSQL (jsonb, 1400001 bytes as JSON)" in str(
        raised.value
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM lonnymq_message")
        assert cursor.fetchone()[0] == 1
