"""Handlers that report progress, for the worker-process tests (tests/worker/test_progress.py)."""

from __future__ import annotations

import time

from django_lonnymq import Message, handler


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
