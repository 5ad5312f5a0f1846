"""pgqueuer (latest release, asyncpg driver as its CLI prefers) through its Python API.

Channels map to entrypoints: "1 channel" is one entrypoint, "1,000 channels" are 1,000
entrypoints (each worker registers all of them with the same no-op coroutine). pgqueuer has
no per-entrypoint fairness, only per-entrypoint concurrency limits (left at unlimited here).
Workers: ``QueueManager.run(batch_size=B, mode=drain)`` (``continuous`` for the latency run).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from datetime import timedelta

import asyncpg
from driverlib import channel_of, parser, payload_json, recorder, report
from pgqueuer import AsyncpgDriver, Queries, QueueManager
from pgqueuer.types import QueueExecutionMode

TABLES = "pgqueuer, pgqueuer_log, pgqueuer_statistics"


async def amain() -> None:
    args = parser().parse_args()
    conn = await asyncpg.connect(args.dsn)
    q = Queries(AsyncpgDriver(conn))
    if args.command == "setup":
        await q.install()
    elif args.command == "reset":
        await conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY")
    elif args.command == "enqueue":
        n, c = args.n, args.channels
        t0 = time.perf_counter()
        if args.mode == "single":
            for i in range(n):
                await q.enqueue(channel_of(i, c), payload_json(i).encode())
        else:
            for start in range(0, n, args.batch):
                idx = range(start, min(start + args.batch, n))
                await q.enqueue(
                    [channel_of(i, c) for i in idx], [payload_json(i).encode() for i in idx], [0] * len(idx)
                )
        report(seconds=time.perf_counter() - t0, n=n)
    elif args.command == "produce":

        async def send(i: int, **kw) -> None:
            await q.enqueue(channel_of(i, args.channels), payload_json(i, **kw).encode())

        warm = 0  # warm-up until the worker has handled one (driverlib.wait_ready, async)
        while args.ready_file and not os.path.exists(args.ready_file):
            await send(warm, warmup=True)
            warm += 1
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        for i in range(args.n):
            await send(i, measured=True)
            await asyncio.sleep(args.interval)
        report(n=args.n, warmup=warm)
    elif args.command == "worker":
        qm = QueueManager(q)

        async def noop(job) -> None:
            recorder.hit(json.loads(job.payload))

        for ch in range(args.channels):
            qm.entrypoint(channel_of(ch, args.channels))(noop)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, qm.shutdown.set)
        recorder.barrier()
        await qm.run(
            batch_size=args.batch,
            mode=QueueExecutionMode.drain if args.burst else QueueExecutionMode.continuous,
            dequeue_timeout=timedelta(seconds=1),
        )
    await conn.close()


if __name__ == "__main__":
    asyncio.run(amain())
