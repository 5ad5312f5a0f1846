"""What running handlers under control costs a worker: ``python -m bench.control`` (a minute or two).

A burst worker process drains N messages whose handler does nothing, once per variant in
each round, in an order that rotates from round to round:

* ``def`` handler, no timeout (the baseline; every run still registers with the worker's
  interruption control, which is what a handler without a timeout pays);
* ``def`` handler with a timeout (a deadline per run, checked by the control thread);
* ``async def`` handler (a task on the worker's event loop instead of a handler thread).

It prints, per variant, the median drain rate (acked / the worker's own elapsed time) and its
ratio to the baseline of the same round (median of the per-round ratios). On a loaded machine
the drains vary by tens of percent from one to the next; the second table isolates the
bookkeeping itself, in-process and CPU-bound: a no-op called directly, through
``Control.run`` (what a ``def`` handler pays per run) and through ``Control.arun`` on
an event loop against a plain ``await`` of it (what an ``async def`` handler pays), in
microseconds per call, medians of the rounds. The database is ``--database-url`` (or
``LONNYMQ_BENCH_DATABASE_URL``); it is dropped and recreated.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from . import core

VARIANTS = [
    ("def handler, no timeout (baseline)", "bench"),
    ("def handler, timeout=60s", "bench_timed"),
    ("async def handler", "bench_async"),
]


def drain(url: str, queue: str, messages: int, concurrency: int, batch: int) -> float:
    conn = core.connect(url)
    try:
        core.reset(conn)
        core.fill(conn, queue, messages, [f"tenant-{i}" for i in range(10)])
    finally:
        conn.close()
    proc = core.start_worker(
        url, queue, "--burst", "--concurrency", str(concurrency), "--batch-size", str(batch)
    )
    code = proc.wait(timeout=600)
    stats = core.worker_stats(proc)
    if code != 0 or stats.get("acked") != messages:
        raise RuntimeError(f"worker for {queue} exited {code} with {stats}:\n" + "\n".join(proc.lines[-20:]))
    return stats["acked"] / stats["elapsed"]


def per_call_us(calls: int, rounds: int) -> dict[str, float]:
    """Microseconds per call of a no-op: direct, under Control.run, awaited, under arun."""
    from django_lonnymq.message import Message
    from django_lonnymq.worker.running import Control

    control = Control({"q": None, "t": 60.0}, cancel_grace=1, interrupt_grace=10)
    plain = Message(id=1, queue="q", channel="c", payload={}, attempt=1, max_attempts=1, enqueued_at=None)  # type: ignore[arg-type]
    timed = Message(id=2, queue="t", channel="c", payload={}, attempt=1, max_attempts=1, enqueued_at=None)  # type: ignore[arg-type]

    def noop() -> None:
        return None

    async def anoop() -> None:
        return None

    async def awaited() -> None:
        for _ in range(calls):
            await asyncio.get_running_loop().create_task(anoop())

    async def controlled() -> None:
        for _ in range(calls):
            await control.arun(plain, anoop)

    def timed_sync(run) -> float:  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        run()
        return (time.perf_counter() - started) / calls * 1e6

    found: dict[str, list[float]] = {}
    cases = {
        "no-op called directly": lambda: [noop() for _ in range(calls)],
        "under Control.run, no timeout": lambda: [control.run(plain, noop) for _ in range(calls)],
        "under Control.run, timeout": lambda: [control.run(timed, noop) for _ in range(calls)],
        "awaited as a task": lambda: asyncio.run(awaited()),
        "under Control.arun": lambda: asyncio.run(controlled()),
    }
    for _ in range(rounds):
        for name, run in cases.items():
            found.setdefault(name, []).append(timed_sync(run))
    return {name: core.median(values) for name, values in found.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.control", description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--messages", type=int, default=20_000, help="messages per drain (default 20,000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    ap.add_argument("--concurrency", type=int, default=4, help="worker concurrency (default 4)")
    ap.add_argument("--batch-size", type=int, default=50, help="worker batch size (default 50)")
    ap.add_argument("--calls", type=int, default=100_000, help="in-process calls per case and round")
    args = ap.parse_args(argv)
    url = core.database_url(args.database_url)
    core.log(f"recreating {url}")
    core.recreate_database(url)
    import django
    from django.conf import settings

    settings.configure()
    django.setup()
    rates: dict[str, list[float]] = {name: [] for name, _ in VARIANTS}
    ratios: dict[str, list[float]] = {name: [] for name, _ in VARIANTS}
    for round_no in range(args.rounds):
        order = VARIANTS[round_no % len(VARIANTS) :] + VARIANTS[: round_no % len(VARIANTS)]
        found = {}
        for name, queue in order:
            found[name] = drain(url, queue, args.messages, args.concurrency, args.batch_size)
            core.log(f"round {round_no + 1}: {name}: {found[name]:,.0f}/s")
        baseline = found[VARIANTS[0][0]]
        for name, _ in VARIANTS:
            rates[name].append(found[name])
            ratios[name].append(found[name] / baseline)
    print(
        f"{args.messages:,} no-op messages per drain, 10 channels, --concurrency {args.concurrency} "
        f"--batch-size {args.batch_size}, {args.rounds} rounds (medians)"
    )
    print(f"{'variant':<36} {'drained/s':>10} {'vs baseline':>12}")
    for name, _ in VARIANTS:
        print(f"{name:<36} {core.median(rates[name]):>10,.0f} {core.median(ratios[name]):>11.2f}x")
    print()
    print(f"per call, in-process, {args.calls:,} calls x {args.rounds} rounds (medians)")
    print(f"{'a no-op handler':<36} {'us/call':>10}")
    for name, micros in per_call_us(args.calls, args.rounds).items():
        print(f"{name:<36} {micros:>10.2f}")


if __name__ == "__main__":
    main()
