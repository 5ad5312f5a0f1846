"""The hand-rolled baseline: a plain table, INSERT to enqueue, DELETE ... SKIP LOCKED to dequeue.

One message per transaction (``--batch 1``) or batches (``--batch 100``): the worker deletes a
batch in a transaction, runs the handler on each row, commits (so a crash mid-batch puts the
batch back: at-least-once, like the others). No channels: it is one FIFO. The latency
producer notifies in the same statement and the worker LISTENs (falls back to a 1 s poll).
"""

from __future__ import annotations

import signal
import time

import psycopg
from driverlib import channel_of, parser, payload_json, recorder, report, wait_ready

SCHEMA = """
CREATE TABLE IF NOT EXISTS raw_queue (
    id      bigserial PRIMARY KEY,
    channel text  NOT NULL,
    payload jsonb NOT NULL
)
"""
INSERT_ONE = "INSERT INTO raw_queue (channel, payload) VALUES (%s, %s::jsonb)"
INSERT_MANY = "INSERT INTO raw_queue (channel, payload) SELECT * FROM unnest(%s::text[], %s::jsonb[])"
INSERT_NOTIFY = (
    "WITH ins AS (INSERT INTO raw_queue (channel, payload) VALUES (%s, %s::jsonb) RETURNING id) "
    "SELECT pg_notify('raw_queue', '') FROM ins"
)
DEQUEUE = """
DELETE FROM raw_queue WHERE id IN (
    SELECT id FROM raw_queue ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
) RETURNING id, payload
"""


def main() -> None:
    args = parser().parse_args()
    conn = psycopg.connect(args.dsn, autocommit=True)
    if args.command == "setup":
        conn.execute(SCHEMA)
    elif args.command == "reset":
        conn.execute("TRUNCATE raw_queue RESTART IDENTITY")
    elif args.command == "enqueue":
        n, c = args.n, args.channels
        t0 = time.perf_counter()
        if args.mode == "single":
            for i in range(n):
                conn.execute(INSERT_ONE, (channel_of(i, c), payload_json(i)), prepare=True)
        else:
            for start in range(0, n, args.batch):
                idx = range(start, min(start + args.batch, n))
                conn.execute(
                    INSERT_MANY,
                    ([channel_of(i, c) for i in idx], [payload_json(i) for i in idx]),
                    prepare=True,
                )
        report(seconds=time.perf_counter() - t0, n=n)
    elif args.command == "produce":

        def send(i: int, **kw) -> None:
            conn.execute(INSERT_NOTIFY, (channel_of(i, args.channels), payload_json(i, **kw)), prepare=True)

        warm = wait_ready(args.ready_file, lambda i: send(i, warmup=True))
        for i in range(args.n):
            send(i, measured=True)
            time.sleep(args.interval)
        report(n=args.n, warmup=warm)
    elif args.command == "worker":
        stop = False

        def on_term(*_):
            nonlocal stop
            stop = True

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        if not args.burst:
            conn.execute("LISTEN raw_queue")
        recorder.barrier()
        while not stop:
            with conn.transaction():
                rows = conn.execute(DEQUEUE, (args.batch,), prepare=True).fetchall()
                for _id, body in rows:
                    recorder.hit(body)
            if rows:
                continue
            if args.burst:
                break
            for _ in conn.notifies(timeout=1.0, stop_after=1):
                pass
    conn.close()


if __name__ == "__main__":
    main()
