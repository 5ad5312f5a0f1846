"""What batch handlers buy and cost: ``python -m bench.batches`` (a few minutes).

An in-process worker (``burst``, concurrency 4, batch 100) empties N messages, over 1 channel
and over 100 channels, once per row; each round runs every row once and each ratio is taken
against "one per call" of the same round and the same work (the median of the rounds' ratios
is shown, with the range):

* no-op: the handler does nothing, so the rows compare the worker's own cost per message
  with a batch handler (``batch=50``: collecting, one call and one ack call per batch) and
  without (one call per message);
* 5 ms per call: each handler call sleeps 5 ms, as a call to a remote API would (one call
  for a message, one for a batch): what batching buys a handler that pays per call.

The columns: messages per second, the handler's calls, and the messages per call (how full
the batches went out: over 100 channels a worker collects at most 2 x 50 x 4 = 400 messages,
so batches go out smaller, when their wait ends: fairness first). The database is
``--database-url`` (default postgres://postgres@127.0.0.1:5432/lq_bench_batches); it is
dropped and recreated.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

from . import core

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_batches"
ROWS = ["one per call", "batch=50"]
WORKS = {"no-op": 0.0, "5 ms per call": 0.005}
LAYOUTS = {"1 channel": 1, "100 channels": 100}
BATCH_WAIT = 0.2

_calls = [0]


def setup(url: str) -> None:
    import django
    import environ
    from django.conf import settings

    settings.configure(
        DATABASES={
            "default": {**environ.Env.db_url_config(url), "OPTIONS": {"options": "-c synchronous_commit=off"}}
        },
        INSTALLED_APPS=["django_lonnymq"],
        USE_TZ=True,
        LOGGING_CONFIG=None,
    )
    django.setup()


def register() -> None:
    """One queue per row and work: a plain handler and a batch handler of each."""
    from django_lonnymq import handler

    for work, pause in WORKS.items():

        def one(message: Any, pause: float = pause) -> None:
            _calls[0] += 1
            if pause:
                time.sleep(pause)

        def many(messages: list[Any], pause: float = pause) -> None:
            _calls[0] += 1
            if pause:
                time.sleep(pause)

        handler(queue_of(ROWS[0], work))(one)
        handler(queue_of(ROWS[1], work), batch=50, batch_wait=BATCH_WAIT)(many)


def queue_of(row: str, work: str) -> str:
    return f"bench_batches_{ROWS.index(row)}_{list(WORKS).index(work)}"


def drain(admin: psycopg.Connection[Any], queue: str, n: int, channels: int) -> tuple[float, int]:
    """Messages per second of an in-process worker emptying ``n`` messages, and its calls."""
    from django_lonnymq import Item, enqueue_many
    from django_lonnymq.worker import Worker

    admin.execute("TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_channel, lonnymq_wake CASCADE")
    for start in range(0, n, 1000):
        enqueue_many(queue, [Item(core.PAYLOAD, channel=f"c{i % channels}") for i in range(start, start + 1000)])
    worker = Worker([queue], concurrency=4, batch_size=100, burst=True, housekeeping=False)
    _calls[0] = 0
    t0 = time.perf_counter()
    stats = worker.run()
    seconds = time.perf_counter() - t0
    assert stats.acked == n, stats.summary()
    return n / seconds, _calls[0]


def measure(url: str, n: int, rounds: int) -> dict[tuple[str, str, str], dict[str, float]]:
    setup(url)
    register()
    admin = psycopg.connect(url, autocommit=True)
    rates: dict[tuple[str, str, str], list[float]] = {}
    ratios: dict[tuple[str, str, str], list[float]] = {}
    calls: dict[tuple[str, str, str], list[int]] = {}
    for r in range(rounds):
        for layout, channels in LAYOUTS.items():
            for work in WORKS:
                base = 0.0
                for row in ROWS:
                    key = (layout, work, row)
                    rate, made = drain(admin, queue_of(row, work), n, channels)
                    base = base or rate
                    rates.setdefault(key, []).append(rate)
                    ratios.setdefault(key, []).append(rate / base)
                    calls.setdefault(key, []).append(made)
                    core.log(f"round {r + 1}/{rounds} {layout}, {work}, {row}: {rate:,.0f} msg/s, {made:,} calls")
    admin.close()
    return {
        key: {
            "rate": statistics.median(rates[key]),
            "ratio": statistics.median(ratios[key]),
            "low": min(ratios[key]),
            "high": max(ratios[key]),
            "calls": statistics.median(calls[key]),
        }
        for key in rates
    }


def table(result: dict[tuple[str, str, str], dict[str, float]], n: int, rounds: int) -> str:
    lines = [
        f"batch handlers, {rounds} rounds of {n:,} messages per row; in-process worker (concurrency 4, "
        f"batch 100), batch handler batch=50, batch_wait={BATCH_WAIT:g} s. Medians; ratio: msg/s against "
        "'one per call' of the same round and work (min-max)",
        f"machine: {core.machine_facts()}",
        "",
        "| layout       | work          | handler      |  msg/s | ratio to one per call | calls | msgs/call |",
        "|--------------|---------------|--------------|-------:|-----------------------|------:|----------:|",
    ]
    for (layout, work, row), r in result.items():
        ratio = f"{r['ratio']:.2f} ({r['low']:.2f}-{r['high']:.2f})"
        lines.append(
            f"| {layout:<12} | {work:<13} | {row:<12} | {r['rate']:6,.0f} | {ratio:<21} | {r['calls']:5,.0f} "
            f"| {n / r['calls']:9.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.batches", description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--messages", type=int, default=5000, help="messages drained per row and round (default 5,000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    args = ap.parse_args(argv)
    url = args.database_url or DEFAULT_URL
    core.log(f"recreating {url}")
    core.recreate_database(url)
    result = measure(url, args.messages, args.rounds)
    print(table(result, args.messages, args.rounds))


if __name__ == "__main__":
    main()
