"""procrastinate (latest release) through its Python API: ``App(PsycopgConnector)``, a no-op
async task, ``defer_async`` / ``batch_defer_jobs_async`` and ``run_worker_async``.

Channels map to procrastinate queue names (``ch0``..``ch999``); workers listen to all queues
(``queues=None``), so this is plain FIFO by job id with no fairness between channels.
Workers: ``run_worker_async(concurrency=K, wait=False)`` in burst runs (exits when no job is
left), ``wait=True`` with LISTEN/NOTIFY for the latency run.
"""

from __future__ import annotations

import asyncio
import os
import time

import procrastinate
from driverlib import channel_of, parser, payload, recorder, report

ARGS = parser().parse_args()
app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(
        conninfo=ARGS.dsn, min_size=1, max_size=max(ARGS.concurrency, 1) + 4
    )
)


@app.task(name="bench_noop", queue="ch0")
async def bench_noop(**body) -> None:
    recorder.hit(body)


async def run(args) -> None:
    connector = app.connector
    async with app.open_async():
        if args.command == "setup":
            await app.schema_manager.apply_schema_async()
        elif args.command == "reset":
            await connector.execute_query_async(
                "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_workers RESTART IDENTITY CASCADE"
            )
        elif args.command == "enqueue":
            n, c = args.n, args.channels
            task = app.tasks["bench_noop"]
            t0 = time.perf_counter()
            if args.mode == "single":
                for i in range(n):
                    await task.configure(queue=channel_of(i, c)).defer_async(**payload(i))
            else:
                for start in range(0, n, args.batch):
                    jobs = [
                        task.configure(queue=channel_of(i, c)).make_new_job(**payload(i))
                        for i in range(start, min(start + args.batch, n))
                    ]
                    await app.job_manager.batch_defer_jobs_async(jobs)
            report(seconds=time.perf_counter() - t0, n=n)
        elif args.command == "produce":
            task = app.tasks["bench_noop"]

            async def send(i: int, **kw) -> None:
                await task.configure(queue=channel_of(i, args.channels)).defer_async(**payload(i, **kw))

            warm = 0
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
            await connector.execute_query_async("SELECT 1")  # pool open and connected
            recorder.barrier()
            await app.run_worker_async(
                concurrency=args.concurrency or 10,
                wait=not args.burst,
                install_signal_handlers=True,
                listen_notify=True,
            )


if __name__ == "__main__":
    asyncio.run(run(ARGS))
