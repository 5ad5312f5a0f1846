"""Handlers of the worker-process tests of progress and strict order (tests/worker/test_progress.py,
tests/worker/test_strict_order.py)."""

from __future__ import annotations

import time

from django_lonnymq import Message, handler
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
