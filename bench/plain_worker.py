"""The baseline's worker: a plain SKIP LOCKED queue table, drained by ``DELETE ... RETURNING``.

    python -m bench.plain_worker drain   --url URL [--batch 100]
    python -m bench.plain_worker latency --url URL --file PATH

Both LISTEN on ``bench_plain`` (producers notify in the same statement as their insert) and
wait for a notification or 1 s when the table is empty, like the queue's worker. ``drain``
deletes batches until stopped (SIGTERM) and prints its counters; ``latency`` writes
"id seconds" per row, where seconds = now - the payload's ``t`` (the producer's clock).
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from typing import Any

import psycopg

from .core import PLAIN_DEQUEUE


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["drain", "latency"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--file", default=None)
    args = parser.parse_args()

    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    conn = psycopg.connect(args.url, autocommit=True, application_name="lonnymq-bench-plain")
    conn.execute("LISTEN bench_plain")
    fetched = empty = 0
    started = time.monotonic()
    print("plain worker ready", flush=True)
    while not stopping:
        rows = conn.execute(PLAIN_DEQUEUE, [args.batch], prepare=True).fetchall()
        if rows:
            fetched += len(rows)
            if args.mode == "latency":
                now = time.time()
                with open(args.file, "a") as out:
                    for row_id, payload in rows:
                        body = payload if isinstance(payload, dict) else json.loads(payload)
                        out.write(f"{row_id} {now - float(body['t']):.6f}\n")
            continue
        empty += 1
        for _ in conn.notifies(timeout=1.0, stop_after=1):
            pass
    elapsed = time.monotonic() - started
    print(f"plain worker stopped: fetched={fetched} empty_fetches={empty} elapsed={elapsed:.1f}s", flush=True)


if __name__ == "__main__":
    main()
