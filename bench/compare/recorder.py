"""What every no-op handler records, whatever queue runs it. Standard library only.

The comparison's drivers run in different virtualenvs (pgqueuer's, procrastinate's, the
project's); each imports this module by path and calls :func:`hit` once per message with the
decoded payload. At exit (or on :func:`dump`) the process writes one JSON file into
``$BENCH_OUT`` (a directory) with: messages handled, wall time of the first and last handler
start, latencies of measured messages (payload ``m`` set) from the payload's enqueue time
``t``, its RSS after ``$BENCH_RSS_AT`` messages, and its peak RSS (VmHWM).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time

_lock = threading.Lock()
_state: dict = {
    "pid": os.getpid(),
    "count": 0,
    "first": None,
    "last": None,
    "latencies_ms": [],
    "warmup": 0,
    "rss_at_n": None,
    "rss_at": int(os.environ.get("BENCH_RSS_AT", "10000")),
}
_ready_file = os.environ.get("BENCH_READY_FILE")
_dumped = False


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def hit(payload: dict | None) -> None:
    """Record one handler start. ``payload`` is the decoded message body."""
    now = time.time()
    global _ready_file
    with _lock:
        s = _state
        if s["first"] is None:
            s["first"] = now
        s["last"] = now
        s["count"] += 1
        if payload is not None:
            if payload.get("m"):
                s["latencies_ms"].append((now - float(payload["t"])) * 1000.0)
            elif payload.get("w"):
                s["warmup"] += 1
        if s["count"] == s["rss_at"]:
            s["rss_at_n"] = _status_kb("VmRSS")
    if _ready_file:
        path, _ready_file = _ready_file, None
        with open(path, "w") as f:
            f.write(str(os.getpid()))


def barrier() -> None:
    """Start line for drain runs: when ``$BENCH_GO_FILE`` is set, say "ready" (a file named
    ``<go file>.ready-<pid>``) and wait until the orchestrator creates the go file, so that
    every worker process starts consuming at the same moment (process start-up, imports and
    connecting are not part of the drain)."""
    go = os.environ.get("BENCH_GO_FILE")
    if not go:
        return
    with open(f"{go}.ready-{os.getpid()}", "w") as f:
        f.write(str(os.getpid()))
    while not os.path.exists(go):
        time.sleep(0.001)


def dump() -> None:
    global _dumped
    out = os.environ.get("BENCH_OUT")
    if not out or _dumped:
        return
    _dumped = True
    with _lock:
        data = dict(_state)
    data["rss_end_kb"] = _status_kb("VmRSS")
    data["rss_peak_kb"] = _status_kb("VmHWM")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"rec-{os.getpid()}.json"), "w") as f:
        json.dump(data, f)


atexit.register(dump)
