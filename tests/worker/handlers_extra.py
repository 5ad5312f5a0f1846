"""Extra handlers for acceptance tests, loaded by worker processes through
``LONNYMQ_HANDLER_MODULES`` (see the settings modules beside this file)."""

from __future__ import annotations

import time

from django.db import connection

from django_lonnymq import Discard, Message, Retry, handler
from tests.testapp.handlers import record


@handler("acc_crash")
def slow_first_time(message: Message) -> None:
    """Like t_sleep, but only the first delivery is slow (``first_seconds``): a redelivery after
    a crash finishes quickly, so the test can see the channel's slot come back."""
    record(message, "start")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE testapp_inflight SET now = now + 1, peak = greatest(peak, now + 1) WHERE channel = %s",
            [message.channel],
        )
    try:
        seconds = message.payload.get("first_seconds", 0) if message.attempt == 1 else 0
        time.sleep(float(seconds or message.payload.get("seconds", 0.05)))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("UPDATE testapp_inflight SET now = now - 1 WHERE channel = %s", [message.channel])
    record(message, "done")


@handler("acc_metrics")
def by_kind(message: Message) -> None:
    """``kind``: ``ok`` succeeds, ``retry`` asks for one retry then succeeds, ``discard`` is
    discarded to the dead letters."""
    kind = message.payload["kind"]
    if kind == "retry" and message.attempt == 1:
        raise Retry(delay=0, reason="once more")
    if kind == "discard":
        raise Discard("not wanted")


@handler("acc_qcap")
def count_queue_in_flight(message: Message) -> None:
    """Counts the queue's handlers running at once (testapp_inflight row ``queue:<queue>``);
    the first delivery sleeps ``first_seconds`` when given, later ones ``seconds``."""
    key = f"queue:{message.queue}"
    record(message, "start")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE testapp_inflight SET now = now + 1, peak = greatest(peak, now + 1) WHERE channel = %s", [key]
        )
    try:
        seconds = message.payload.get("first_seconds", 0) if message.attempt == 1 else 0
        time.sleep(float(seconds or message.payload.get("seconds", 0.05)))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("UPDATE testapp_inflight SET now = now - 1 WHERE channel = %s", [key])
    record(message, "done")


def _yields(message: Message):  # type: ignore[no-untyped-def]
    record(message, "body")
    yield message


async def _yields_async(message: Message):  # type: ignore[no-untyped-def]
    record(message, "body")
    yield message


@handler("acc_gen_hidden")
def hides_a_generator(message: Message) -> object:
    """Returns a generator (as a decorator that does not set ``__wrapped__`` would): the
    message fails, its body never runs."""
    return _yields(message)


@handler("acc_agen_hidden")
async def hides_an_async_generator(message: Message) -> object:
    """An ``async def`` that returns an async generator: the message fails, its body never runs."""
    return _yields_async(message)
