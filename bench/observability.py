"""What tracing costs a single enqueue: ``python -m bench.observability`` (about a minute).

One message per transaction (autocommit), the same ~100-byte payload, 10 channels, in rounds;
every round runs each row once on emptied tables, and each ratio is taken against "tracing
off" of the same round (the median of the rounds' ratios is shown):

* tracing off: ``LONNYMQ_TRACING = False`` (also what a project without opentelemetry gets:
  nothing is imported);
* SDK, sampled out: the OpenTelemetry SDK configured, the trace not sampled (a publish span
  that does not record: no trace context is written);
* SDK, recording: every span recorded (an in-memory exporter), so each enqueue also writes
  its trace context to ``lonnymq_trace`` in the same transaction.

Needs opentelemetry-sdk (the dev group). The database is ``--database-url`` (default
postgres://postgres@127.0.0.1:5432/lq_bench_observability); it is dropped and recreated.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

from . import core

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_observability"
QUEUE = "bench_observability"
CHANNELS = 10
ROWS = ["tracing off", "SDK, sampled out", "SDK, recording"]


class ToggleSampler:
    """Samples every trace, or none, as the bench says."""

    def __init__(self) -> None:
        self.on = False

    def should_sample(self, *args: Any, **kwargs: Any) -> Any:
        from opentelemetry.sdk.trace.sampling import Decision, SamplingResult

        return SamplingResult(Decision.RECORD_AND_SAMPLE if self.on else Decision.DROP)

    def get_description(self) -> str:
        return "ToggleSampler"


def setup(url: str) -> tuple[ToggleSampler, Any]:
    import django
    import environ
    from django.conf import settings

    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        raise SystemExit(
            "bench.observability needs opentelemetry-sdk: pip install opentelemetry-sdk"
        ) from None
    settings.configure(
        DATABASES={
            "default": {**environ.Env.db_url_config(url), "OPTIONS": {"options": "-c synchronous_commit=off"}}
        },
        INSTALLED_APPS=["django_lonnymq"],
        USE_TZ=True,
    )
    django.setup()
    sampler = ToggleSampler()
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)  # type: ignore[arg-type]
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return sampler, exporter


def measure(url: str, n: int, rounds: int) -> dict[str, dict[str, float]]:
    from django.test import override_settings

    from django_lonnymq import enqueue

    sampler, exporter = setup(url)
    admin = psycopg.connect(url, autocommit=True)

    def reset() -> None:
        admin.execute("TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_channel, lonnymq_wake, lonnymq_trace CASCADE")
        admin.execute(
            "INSERT INTO lonnymq_channel (queue, name) SELECT %s, 'tenant-' || g FROM generate_series(0, %s) g",
            (QUEUE, CHANNELS - 1),
        )
        exporter.clear()

    def run() -> None:
        for i in range(n):
            enqueue(QUEUE, core.PAYLOAD, channel=f"tenant-{i % CHANNELS}")

    modes = {"tracing off": (False, False), "SDK, sampled out": (True, False), "SDK, recording": (True, True)}
    micros: dict[str, list[float]] = {row: [] for row in ROWS}
    ratios: dict[str, list[float]] = {row: [] for row in ROWS}
    for r in range(rounds):
        this: dict[str, float] = {}
        for row, (tracing, recording) in modes.items():
            reset()
            sampler.on = recording
            with override_settings(LONNYMQ_TRACING=tracing):
                t0 = time.perf_counter()
                run()
                this[row] = (time.perf_counter() - t0) / n * 1e6
            stored = admin.execute("SELECT count(*) FROM lonnymq_trace").fetchone()[0]
            assert stored == (n if recording else 0), (row, stored)
            micros[row].append(this[row])
        for row in ROWS:
            ratios[row].append(this[row] / this["tracing off"])
        core.log(f"round {r + 1}/{rounds}: " + ", ".join(f"{row} {us:.0f} us" for row, us in this.items()))
    admin.close()
    return {
        row: {
            "us": statistics.median(micros[row]),
            "ratio": statistics.median(ratios[row]),
            "low": min(ratios[row]),
            "high": max(ratios[row]),
        }
        for row in ROWS
    }


def table(result: dict[str, dict[str, float]], n: int, rounds: int) -> str:
    lines = [
        f"single enqueue, {n:,} per round, {rounds} rounds, synchronous_commit=off; median us per message, "
        "median of the rounds' ratios to tracing off (min-max)",
        "",
        "| tracing          | us/msg | msg/s  | ratio to off        |",
        "|------------------|--------|--------|---------------------|",
    ]
    for row, r in result.items():
        ratio = f"{r['ratio']:.2f} ({r['low']:.2f}-{r['high']:.2f})"
        lines.append(f"| {row:<16} | {r['us']:6.0f} | {1e6 / r['us']:6,.0f} | {ratio:<19} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.observability", description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--messages", type=int, default=2000, help="enqueues per row and round (default 2,000)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds (default 7)")
    args = ap.parse_args(argv)
    url = args.database_url or DEFAULT_URL
    core.log(f"recreating {url}")
    core.recreate_database(url)
    result = measure(url, args.messages, args.rounds)
    print(table(result, args.messages, args.rounds))


if __name__ == "__main__":
    main()
