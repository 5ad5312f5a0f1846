"""Batch handlers in eager mode: the handler gets each channel's messages as lists of at most
N, a ``BatchFailed`` retries only the messages it names (and keeps the call's writes), any
other exception rolls the call's writes back and retries every message of it; durable sleeps
and waits are refused in a batch, steps and progress work."""

from __future__ import annotations

import pytest

from django_lonnymq import BatchFailed, Discard, Item, Message, enqueue_many, handler
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.models import Channel, DeadMessage
from django_lonnymq.testing import eager

CALLS: list[list[tuple[str, int, int]]] = []


@handler("eager_batch", batch=3)
def take_three(messages: list[Message]) -> None:
    """Records each call; names the messages whose payload asks to fail on attempt 1."""
    CALLS.append([(m.channel, m.payload["n"], m.attempt) for m in messages])
    Channel.objects.create(queue="eager_batch_seen", name=f"call-{len(CALLS)}")
    failed = {m.id: "refused" for m in messages if m.payload.get("fail") and m.attempt == 1}
    failed |= {m.id: Discard("never") for m in messages if m.payload.get("discard")}
    if failed:
        raise BatchFailed(failed)
    if any(m.payload.get("boom") and m.attempt == 1 for m in messages):
        raise RuntimeError("the whole call fails")


@handler("eager_batch_async", batch=5)
async def take_five(messages: list[Message]) -> None:
    CALLS.append([(m.channel, m.payload["n"], m.attempt) for m in messages])


@handler("eager_batch_durable", batch=2)
def durable_in_batch(messages: list[Message]) -> None:
    for message in messages:
        message.progress(1, 2, "half")
        message.step("once", lambda: 1)
    messages[0].sleep("nap", 10)


@pytest.fixture(autouse=True)
def _calls():
    CALLS.clear()
    yield
    CALLS.clear()


@pytest.mark.django_db
def test_each_call_holds_one_channels_messages_at_most_n():
    with eager():
        enqueue_many("eager_batch", [Item({"n": n}, channel="a" if n < 7 else "b") for n in range(10)])
    assert sorted(len(call) for call in CALLS) == [1, 3, 3, 3]
    assert all(len({channel for channel, _, _ in call}) == 1 for call in CALLS), CALLS
    assert sorted(n for call in CALLS for _, n, _ in call) == list(range(10))
    assert Channel.objects.filter(queue="eager_batch_seen").count() == 4


@pytest.mark.django_db
def test_batch_failed_retries_only_the_named_messages_and_keeps_the_writes():
    with eager():
        ids = enqueue_many("eager_batch", [{"n": 0}, {"n": 1, "fail": True}, {"n": 2}, {"n": 3, "discard": True}],
                           channel="a")  # fmt: skip
    ran = [(n, attempt) for call in CALLS for _, n, attempt in call]
    assert ran == [(0, 1), (1, 1), (2, 1), (3, 1), (1, 2)], CALLS
    assert list(DeadMessage.objects.values_list("id", "last_error")) == [(ids[3], "never")]
    assert Channel.objects.filter(queue="eager_batch_seen").count() == 3  # every call's writes kept


@pytest.mark.django_db
def test_any_other_exception_rolls_the_call_back_and_retries_all_of_it():
    with eager():
        enqueue_many("eager_batch", [{"n": 0}, {"n": 1, "boom": True}], channel="a")
    assert [[(n, a) for _, n, a in call] for call in CALLS] == [[(0, 1), (1, 1)], [(0, 2), (1, 2)]]
    # The failed call's write was rolled back with it; the second call's stays.
    assert list(Channel.objects.filter(queue="eager_batch_seen").values_list("name", flat=True)) == ["call-2"]


@pytest.mark.django_db
def test_an_async_batch_handler_runs_in_eager_mode():
    with eager():
        enqueue_many("eager_batch_async", [Item({"n": n}, channel=f"c{n % 2}") for n in range(12)])
    assert sorted(len(call) for call in CALLS) == [1, 1, 5, 5]
    assert all(len({channel for channel, _, _ in call}) == 1 for call in CALLS), CALLS


@pytest.mark.django_db
def test_a_durable_sleep_is_refused_in_a_batch_and_the_call_fails():
    with eager():
        ids = enqueue_many("eager_batch_durable", [{"n": 0}, {"n": 1}], channel="a", max_attempts=1)
    dead = dict(DeadMessage.objects.values_list("id", "last_error"))
    assert sorted(dead) == sorted(ids)
    assert "sleep is for handlers of one message" in dead[ids[0]], dead
    with pytest.raises(InvalidArgument, match="is for handlers of one message"):
        Message(id=1, queue="q", channel="c", payload=None, attempt=1, max_attempts=1, enqueued_at=None,
                _batched=True).sleep("nap", 1)  # fmt: skip
