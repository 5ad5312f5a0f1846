"""What the lifecycle signals cost a worker per message: ``python -m bench.signals`` (about a minute).

Two measures, each in rounds; every round runs each row once and each ratio is taken against
"no signal observer" of the same round (the median of the rounds' ratios is shown):

* dispatch: the observer events of one acked message (``handler_started``, ``acked``) through
  a worker's :class:`~django_lonnymq.worker.observer.Observers` holding the log and signal
  observers, in a tight loop (no database): what the signals add to the worker's own code;
* drain: a real in-process worker (``burst``, concurrency 4, batch 100, no-op handler)
  emptying N messages from 10 channels, in microseconds per message.

Rows: no signal observer (the baseline: the worker's signal observer taken off), the signal
observer with no receiver (what every worker pays), one no-op receiver on each of
``message_started`` and ``message_finished``. The database is ``--database-url`` (default
postgres://postgres@127.0.0.1:5432/lq_bench_signals); it is dropped and recreated.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime
from typing import Any

import psycopg

from . import core

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_signals"
QUEUE = "bench_signals"
CHANNELS = 10
ROWS = ["no signal observer", "no receiver", "one receiver"]


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


def _noop_receiver(sender: Any, **kwargs: Any) -> None:
    return None


class Receivers:
    """One no-op receiver on message_started and message_finished while on."""

    def __enter__(self) -> None:
        from django_lonnymq.signals import message_finished, message_started

        message_started.connect(_noop_receiver)
        message_finished.connect(_noop_receiver)

    def __exit__(self, *exc: object) -> None:
        from django_lonnymq.signals import message_finished, message_started

        message_started.disconnect(_noop_receiver)
        message_finished.disconnect(_noop_receiver)


def _without_signals(observers: Any) -> None:
    """Take the signal observer's hooks off a worker's observers (the baseline)."""
    from django_lonnymq.worker.observer import SignalObserver

    for hooks in observers._hooks.values():
        hooks[:] = [hook for hook in hooks if not isinstance(getattr(hook, "__self__", None), SignalObserver)]


def dispatch(row: str, n: int) -> float:
    """Microseconds of a message's observer events (start, ack) through a worker's observers."""
    from django_lonnymq.message import Message
    from django_lonnymq.worker.observer import LogObserver, Observers, SignalObserver

    observers = Observers()
    observers.add(LogObserver())
    if row != ROWS[0]:
        observers.add(SignalObserver())
    message = Message(1, QUEUE, "c", {}, 1, 5, datetime.now(UTC))
    start = time.perf_counter()
    for _ in range(n):
        observers.handler_started(message)
        observers.acked(message)
    return (time.perf_counter() - start) / n * 1e6


def drain(row: str, admin: psycopg.Connection[Any], n: int) -> float:
    """Microseconds per message of an in-process worker emptying ``n`` messages."""
    from django_lonnymq import Item, enqueue_many
    from django_lonnymq.worker import Worker

    admin.execute("TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_channel, lonnymq_wake CASCADE")
    for start in range(0, n, 1000):
        enqueue_many(
            QUEUE, [Item(core.PAYLOAD, channel=f"c{i % CHANNELS}") for i in range(start, start + 1000)]
        )
    worker = Worker([QUEUE], concurrency=4, batch_size=100, burst=True, housekeeping=False)
    if row == ROWS[0]:
        _without_signals(worker.observers)
    t0 = time.perf_counter()
    stats = worker.run()
    seconds = time.perf_counter() - t0
    assert stats.acked == n, stats.summary()
    return seconds / n * 1e6


def measure(url: str, n: int, calls: int, rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    from contextlib import nullcontext

    from django_lonnymq import handler

    setup(url)
    handler(QUEUE)(lambda message: None)
    admin = psycopg.connect(url, autocommit=True)
    result: dict[str, dict[str, dict[str, float]]] = {}
    for measure_name in ("dispatch", "drain"):
        micros: dict[str, list[float]] = {row: [] for row in ROWS}
        ratios: dict[str, list[float]] = {row: [] for row in ROWS}
        for r in range(rounds):
            this: dict[str, float] = {}
            for row in ROWS:
                with Receivers() if row == ROWS[2] else nullcontext():
                    this[row] = dispatch(row, calls) if measure_name == "dispatch" else drain(row, admin, n)
                micros[row].append(this[row])
            for row in ROWS:
                ratios[row].append(this[row] / this[ROWS[0]])
            core.log(
                f"{measure_name} round {r + 1}/{rounds}: "
                + ", ".join(f"{k} {v:.2f} us" for k, v in this.items())
            )
        result[measure_name] = {
            row: {
                "us": statistics.median(micros[row]),
                "ratio": statistics.median(ratios[row]),
                "low": min(ratios[row]),
                "high": max(ratios[row]),
            }
            for row in ROWS
        }
    admin.close()
    return result


def table(result: dict[str, dict[str, dict[str, float]]], n: int, calls: int, rounds: int) -> str:
    lines = [
        f"lifecycle signals, {rounds} rounds; dispatch: {calls:,} messages' events (start + ack) per round, "
        f"no database; drain: {n:,} messages per round, in-process worker (concurrency 4, batch 100). "
        "Median us per message, median of the rounds' ratios to 'no signal observer' (min-max)",
        f"machine: {core.machine_facts()}",
        "",
        "| measure  | row                | us/msg | ratio to baseline   |",
        "|----------|--------------------|--------|---------------------|",
    ]
    for measure_name, rows in result.items():
        for row, r in rows.items():
            ratio = f"{r['ratio']:.2f} ({r['low']:.2f}-{r['high']:.2f})"
            lines.append(f"| {measure_name:<8} | {row:<18} | {r['us']:6.2f} | {ratio:<19} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.signals", description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", default=None)
    ap.add_argument(
        "--messages", type=int, default=5000, help="messages drained per row and round (default 5,000)"
    )
    ap.add_argument("--calls", type=int, default=200_000, help="messages dispatched per row and round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    args = ap.parse_args(argv)
    url = args.database_url or DEFAULT_URL
    core.log(f"recreating {url}")
    core.recreate_database(url)
    result = measure(url, args.messages, args.calls, args.rounds)
    print(table(result, args.messages, args.calls, args.rounds))


if __name__ == "__main__":
    main()
