"""Handlers for the timeout, cancel and async tests (tests/worker/test_running_control.py),
loaded by worker processes through ``LONNYMQ_HANDLER_MODULES`` (settings_control.py)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import timedelta

from asgiref.sync import sync_to_async
from django.db import connection

from django_lonnymq import Message, handler
from tests.testapp.handlers import record


def _naps(seconds: float, message: Message | None = None) -> None:
    """Sleep in 50 ms naps: Python code between them, so an interruption lands within 50 ms.
    With ``message``, stop early when it is cancelled (a cooperative handler)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if message is not None and message.cancel_requested:
            record(message, "noticed")
            return
        time.sleep(0.05)


@handler("ctl_nap", timeout=timedelta(seconds=1))
def nap_past_the_timeout(message: Message) -> None:
    """Naps for ``seconds`` (60): interrupted after its 1 s timeout."""
    record(message, "start")
    try:
        _naps(float(message.payload.get("seconds", 60)))
    finally:
        record(message, "stopped")
    record(message, "done")


@handler("ctl_stuck", timeout=1)
def stuck_in_a_c_call(message: Message) -> None:
    """One long time.sleep on the first attempt: a C call the interruption cannot enter."""
    record(message, "start")
    if message.attempt == 1:
        time.sleep(float(message.payload.get("seconds", 60)))
    record(message, "done")


@handler("ctl_busy")
def busy_until_interrupted(message: Message) -> None:
    """Ignores ``cancel_requested``: only the interruption stops it."""
    record(message, "start")
    try:
        _naps(float(message.payload.get("seconds", 60)))
    finally:
        record(message, "stopped")
    record(message, "done")


@handler("ctl_coop")
def stops_when_cancelled(message: Message) -> None:
    """Checks ``message.cancel_requested`` between steps and returns when it is set."""
    record(message, "start")
    _naps(float(message.payload.get("seconds", 60)), message)


@handler("ctl_after")
def after_cancel(message: Message) -> None:
    record(message, "done")


def _record_times(message: Message, started: float, ended: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO testapp_delivery (message_id, queue, channel, attempt, event, pid, payload)"
            " VALUES (%s, %s, %s, %s, 'done', %s, %s::jsonb)",
            [message.id, message.queue, message.channel, message.attempt, os.getpid(),
             json.dumps({"started": started, "ended": ended})],
        )  # fmt: skip


@handler("ctl_async")
async def async_nap(message: Message) -> None:
    """Awaits ``seconds`` (0.1), then records when it started and ended (the event loop's clock)."""
    started = time.time()
    await asyncio.sleep(float(message.payload.get("seconds", 0.1)))
    # Outside the one thread Django's async ORM uses: 200 inserts there would run one by one.
    await sync_to_async(_record_times, thread_sensitive=False)(message, started, time.time())


@handler("ctl_async_slow", timeout=timedelta(seconds=1))
async def async_past_the_timeout(message: Message) -> None:
    await sync_to_async(record)(message, "start")
    try:
        await asyncio.sleep(float(message.payload.get("seconds", 60)))
    except asyncio.CancelledError:
        await sync_to_async(record)(message, "stopped")
        raise
    await sync_to_async(record)(message, "done")
