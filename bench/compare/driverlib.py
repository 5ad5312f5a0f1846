"""Shared by the per-system driver scripts (standard library only: they run in other venvs).

Every driver script takes the same sub-commands::

    setup    --dsn D                 install the system's schema into an empty database
    reset    --dsn D                 empty its tables
    enqueue  --dsn D --mode single|batch --n N --channels C [--batch 100]
             prints {"seconds": s, "n": N}
    worker   --dsn D --channels C --batch B [--concurrency K] [--burst]
             runs no-op handlers (recorder.hit) until the queue is empty (--burst) or SIGTERM;
             waits at recorder.barrier() first when $BENCH_GO_FILE is set
    produce  --dsn D --n N --interval S --ready-file F --channels C
             latency producer: warm-up messages until the worker's ready-file exists, then N
             measured messages S seconds apart, one per transaction
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import recorder  # noqa: E402

PAD = "x" * 60


def payload(i: int, *, measured: bool = False, warmup: bool = False) -> dict:
    """The ~100-byte JSON body every system carries (``t``: enqueue wall time)."""
    body: dict = {"t": round(time.time(), 6), "i": i, "pad": PAD}
    if measured:
        body["m"] = 1
    if warmup:
        body["w"] = 1
    return body


def payload_json(i: int, **kw) -> str:
    return json.dumps(payload(i, **kw), separators=(",", ":"))


def channel_of(i: int, channels: int) -> str:
    return f"ch{i % channels}"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["setup", "reset", "enqueue", "worker", "produce"])
    p.add_argument("--dsn", required=True)
    p.add_argument("--mode", default="single", choices=["single", "batch"])
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--channels", type=int, default=1)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=0)
    p.add_argument("--burst", action="store_true")
    p.add_argument("--interval", type=float, default=0.01)
    p.add_argument("--ready-file", default=None)
    return p


def report(**fields) -> None:
    print(json.dumps(fields), flush=True)


def wait_ready(ready_file: str | None, send_warmup, timeout: float = 60.0) -> int:
    """Send a warm-up message every 50 ms until the worker has handled one. Returns how many."""
    sent = 0
    deadline = time.monotonic() + timeout
    while ready_file and not os.path.exists(ready_file):
        if time.monotonic() > deadline:
            raise SystemExit("worker never became ready")
        send_warmup(sent)
        sent += 1
        time.sleep(0.05)
    time.sleep(0.5)  # let the worker go idle again
    return sent


__all__ = ["recorder", "payload", "payload_json", "channel_of", "parser", "report", "wait_ready"]
