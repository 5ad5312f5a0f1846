"""Handlers of the worker-process tests of progress, strict order and batch handlers
(tests/worker/test_progress.py, test_strict_order.py, test_batches.py)."""

from __future__ import annotations

import time

from django.db import connection

from django_lonnymq import BatchFailed, Message, handler
from tests.testapp.handlers import record


@handler("acc_progress_burst")
def burst(message: Message) -> None:
    """1,000 reports as fast as it can (about a second); the last note is the seconds it took."""
    started = time.monotonic()
    for done in range(1, 1001):
        message.progress(done, 1000, "" if done < 1000 else f"{time.monotonic() - started:.3f}")
        time.sleep(0.001)


@handler("acc_progress_hold")
def hold(message: Message) -> None:
    """Half done, then it holds its thread for a while: the report shows while it runs."""
    message.progress(1, 2, "half")
    time.sleep(float(message.payload["hold"]))
    message.progress(2, 2, "all")


@handler("acc_ordered")
def ordered(message: Message) -> None:
    """Records each run; fails the attempts the payload names ("fail": how many)."""
    record(message, "run")
    if message.attempt <= int(message.payload.get("fail", 0)):
        raise RuntimeError(f"attempt {message.attempt} of message {message.payload['n']} fails")
    time.sleep(0.02)


def _inflight(channel: str, delta: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE testapp_inflight SET now = now + %s, peak = greatest(peak, now + %s) WHERE channel = %s",
            [delta, delta, channel],
        )


@handler("acc_batch", batch=50, batch_wait=0.3)
def batched(messages: list[Message]) -> None:
    """Logs each call (a row per message, event ``batch <first id>.<its attempt> <size> <leases>``,
    leases: how many dequeue calls leased its messages) and the messages
    its channel has in calls at once (testapp_inflight); fails, on their first attempt only,
    the messages whose payload says ``"fail": true`` (BatchFailed names them)."""
    channel = messages[0].channel
    leases = len({m.lease_token for m in messages})  # the dequeue calls that leased the call's messages
    for message in messages:
        record(message, f"batch {messages[0].id}.{messages[0].attempt} {len(messages)} {leases}")
    _inflight(channel, len(messages))
    try:
        time.sleep(0.05)
    finally:
        _inflight(channel, -len(messages))
    failed = {m: RuntimeError(f"item {m.payload['n']} refused") for m in messages
              if m.payload.get("fail") and m.attempt == 1}  # fmt: skip
    if failed:
        raise BatchFailed(failed)


@handler("acc_batch_async", batch=20, batch_wait=0.2)
async def batched_async(messages: list[Message]) -> None:
    """The async twin: records each call's messages; a payload with ``"boom"`` fails the call."""
    from asgiref.sync import sync_to_async

    for message in messages:
        await sync_to_async(record)(message, f"batch {messages[0].id}.{messages[0].attempt} {len(messages)}")
    if any(m.payload.get("boom") and m.attempt == 1 for m in messages):
        raise RuntimeError("the whole call fails")
