"""Eager mode runs an ``async def`` handler too (through async_to_sync), in a TestCase."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction

from django_lonnymq import Message, enqueue, handler
from django_lonnymq.models import Channel, DeadMessage
from django_lonnymq.testing import eager

pytestmark = pytest.mark.django_db


@handler("eager_async")
async def leave_a_channel_async(message: Message) -> None:
    if message.payload.get("fail"):
        raise RuntimeError("async failure")
    await sync_to_async(Channel.objects.create)(queue="eager_async_seen", name=str(message.payload["n"]))


def test_an_async_handler_runs_when_the_enqueue_returns(lonnymq_eager):
    enqueue("eager_async", {"n": 5})
    assert list(Channel.objects.filter(queue="eager_async_seen").values_list("name", flat=True)) == ["5"]


def test_a_failing_async_handler_is_retried_then_dead(lonnymq_eager):
    message_id = enqueue("eager_async", {"n": 6, "fail": True}, max_attempts=2)
    dead = DeadMessage.objects.get(pk=message_id)
    assert (dead.reason, dead.attempts) == ("failed", 2) and "async failure" in dead.last_error


def test_a_rolled_back_enqueue_runs_no_async_handler():
    with eager(), pytest.raises(ZeroDivisionError), transaction.atomic():
        enqueue("eager_async", {"n": 7})
        1 / 0  # noqa: B018
    assert not Channel.objects.filter(queue="eager_async_seen").exists()
