"""Handlers of the benchmark's worker processes (LONNYMQ_HANDLER_MODULES in bench/settings.py)."""

from __future__ import annotations

import os
import threading
import time

from django_lonnymq import Message, handler

_lock = threading.Lock()


@handler("bench")
def noop(message: Message) -> None:
    """Does nothing: the drain benchmarks measure the queue, not the work."""


@handler("bench_latency")
def record_latency(message: Message) -> None:
    """Appends "id latency_seconds" to LONNYMQ_BENCH_LATENCY_FILE; the payload's ``t`` is the
    producer's clock just before it enqueued the message (same machine, same clock)."""
    started = time.time()
    path = os.environ["LONNYMQ_BENCH_LATENCY_FILE"]
    with _lock, open(path, "a") as out:
        out.write(f"{message.id} {started - float(message.payload['t']):.6f}\n")


@handler("bench_timed", timeout=60)
def noop_with_timeout(message: Message) -> None:
    """Does nothing, under a timeout: what the worker's timeout bookkeeping costs per message."""


@handler("bench_async")
async def noop_async(message: Message) -> None:
    """Does nothing, as a task on the worker's event loop."""


@handler("bench_step")
def record_start(message: Message) -> None:
    """Appends "id start_time" to LONNYMQ_BENCH_LATENCY_FILE (a workflow step's start, for
    bench/workflows.py: its release time is in lonnymq_workflow_step.released_at)."""
    started = time.time()
    path = os.environ["LONNYMQ_BENCH_LATENCY_FILE"]
    with _lock, open(path, "a") as out:
        out.write(f"{message.id} {started:.6f}\n")
