"""Eager mode for users' tests, aenqueue for async views, and drain()'s warning in a TestCase.

Eager mode writes the message with the real SQL function and runs its handler in-process on
the caller's connection, through the real dequeue, ack and fail: so a plain ``TestCase``
(one transaction that never commits) sees the handler's effect as soon as the enqueuing code
returns, a rolled-back enqueue runs nothing, and retries and dead letters still apply.
"""

from __future__ import annotations

import warnings

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.test import AsyncClient, override_settings

from django_lonnymq import (
    Discard,
    Item,
    Message,
    aenqueue,
    aenqueue_many,
    api,
    enqueue,
    enqueue_many,
    handler,
)
from django_lonnymq.models import Channel, DeadMessage
from django_lonnymq.models import Message as MessageRow
from django_lonnymq.testing import drain, eager

SEEN: list[tuple[int, int]] = []


@handler("eager_effect")
def leave_a_channel(message: Message) -> None:
    """A database effect the test can look for: a channel named after the payload."""
    SEEN.append((message.id, message.attempt))
    Channel.objects.create(queue="eager_seen", name=str(message.payload["n"]))


@handler("eager_flaky")
def fail_twice(message: Message) -> None:
    SEEN.append((message.id, message.attempt))
    if message.attempt < 3:
        raise RuntimeError(f"not yet ({message.attempt})")
    Channel.objects.create(queue="eager_seen", name="flaky-done")


@handler("eager_always_fails")
def always_fails(message: Message) -> None:
    SEEN.append((message.id, message.attempt))
    raise RuntimeError("never works")


@handler("eager_discard")
def discard(message: Message) -> None:
    raise Discard("not wanted")


@pytest.fixture(autouse=True)
def _seen():
    SEEN.clear()
    yield
    SEEN.clear()


def seen_names() -> list[str]:
    return sorted(Channel.objects.filter(queue="eager_seen").values_list("name", flat=True))


@pytest.mark.django_db
def test_in_a_testcase_the_handler_has_run_when_enqueue_returns():
    with eager():
        message_id = enqueue("eager_effect", {"n": 1})
        assert seen_names() == ["1"]  # the handler's write, in the test's own transaction
        ids = enqueue_many("eager_effect", [{"n": 2}, Item({"n": 3}, channel="other")])
    assert seen_names() == ["1", "2", "3"]
    assert [m for m, _ in SEEN] == [message_id, *ids]
    assert not MessageRow.objects.filter(id__in=[message_id, *ids]).exists()  # acked


@pytest.mark.django_db
def test_a_rolled_back_enqueue_runs_nothing():
    with eager(), pytest.raises(ZeroDivisionError), transaction.atomic():
        enqueue("eager_effect", {"n": 1})
        raise ZeroDivisionError
    assert SEEN == [] and seen_names() == []


@pytest.mark.django_db
@override_settings(LONNYMQ_EAGER=True)
def test_the_setting_turns_it_on_and_retries_and_dead_letters_apply():
    flaky = enqueue("eager_flaky", {}, max_attempts=5)
    assert [(flaky, 1), (flaky, 2), (flaky, 3)] == SEEN
    assert seen_names() == ["flaky-done"]
    SEEN.clear()
    doomed = enqueue("eager_always_fails", {}, max_attempts=2)
    assert [(doomed, 1), (doomed, 2)] == SEEN
    dead = DeadMessage.objects.get(id=doomed)
    assert dead.reason == "failed" and "never works" in dead.last_error
    discarded = enqueue("eager_discard", {})
    assert DeadMessage.objects.get(id=discarded).reason == "discarded"


@pytest.mark.django_db
def test_a_requeued_dead_message_runs_again_at_once():
    with eager():
        doomed = enqueue("eager_always_fails", {}, max_attempts=1)
        flaky = enqueue("eager_flaky", {}, max_attempts=1)
    assert [(doomed, 1), (flaky, 1)] == SEEN
    assert set(DeadMessage.objects.values_list("id", flat=True)) == {doomed, flaky}
    SEEN.clear()
    with eager():
        # reset_attempts=False: the flaky one's next attempt (2) fails again; the other as before
        assert api.requeue_dead([flaky, doomed], reset_attempts=False) == sorted([doomed, flaky])
    assert sorted(SEEN) == sorted([(doomed, 2), (flaky, 2)])
    assert set(DeadMessage.objects.values_list("id", flat=True)) == {doomed, flaky}
    SEEN.clear()
    api.requeue_dead([flaky], reset_attempts=False)  # eager mode off: it waits for a worker
    assert SEEN == [] and MessageRow.objects.filter(id=flaky).exists()


@pytest.mark.django_db(transaction=True)
def test_a_requeue_inside_a_rolled_back_block_runs_nothing():
    with eager():
        doomed = enqueue("eager_always_fails", {}, max_attempts=1)
    SEEN.clear()
    with eager(), pytest.raises(ZeroDivisionError), transaction.atomic():
        api.requeue_dead([doomed])
        raise ZeroDivisionError
    assert SEEN == [] and DeadMessage.objects.filter(id=doomed).exists()


@pytest.mark.django_db(transaction=True)
def test_with_real_transactions_it_runs_when_the_enqueue_commits():
    with eager():
        with transaction.atomic():
            enqueue("eager_effect", {"n": 7})
            assert SEEN == []  # not before the commit
        assert [attempt for _, attempt in SEEN] == [1]
        assert seen_names() == ["7"]


@pytest.mark.django_db
def test_without_eager_mode_nothing_runs():
    enqueue("eager_effect", {"n": 1})
    assert SEEN == []


@pytest.mark.django_db
def test_drain_warns_inside_a_testcase_transaction():
    enqueue("eager_effect", {"n": 1})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stats = drain("eager_effect")
    assert stats.fetched == 0  # the worker's connection cannot see the test's transaction
    assert any("drain() runs inside a transaction" in str(w.message) for w in caught)


def test_aenqueue_from_async_code_and_the_message_runs(lonnymq_drain):
    async def view_body() -> list[int]:
        first = await aenqueue("eager_effect", {"n": 11}, channel="async")
        more = await aenqueue_many("eager_effect", (Item({"n": n}) for n in (12, 13)))
        return [first, *more]

    ids = async_to_sync(view_body)()
    with override_settings(ROOT_URLCONF="tests.eager.urls"):
        response = async_to_sync(AsyncClient().get)("/upload/?n=14")
    assert response.status_code == 200
    ids.append(response.json()["message_id"])
    assert sorted(MessageRow.objects.values_list("id", flat=True)) == sorted(ids)  # committed
    stats = lonnymq_drain("eager_effect")
    assert stats.acked == 4 and seen_names() == ["11", "12", "13", "14"]


@pytest.mark.django_db(transaction=True)
def test_aenqueue_refuses_bad_input_like_enqueue():
    from django_lonnymq.exceptions import InvalidArgument

    with pytest.raises(InvalidArgument, match="items must be a list"):
        async_to_sync(aenqueue_many)("eager_effect", "abc")
    with pytest.raises(InvalidArgument, match="queue must"):
        async_to_sync(aenqueue)("", {})
    assert not MessageRow.objects.exists()
