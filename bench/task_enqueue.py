"""A Django Task's enqueue, one SQL call against the two-statement transaction it replaced:
``python -m bench.task_enqueue`` (about a minute).

Rows, each ``--tasks`` enqueues per round in autocommit (one task per transaction), on one
Django connection, same arguments, 10 tenant channels:

* one SQL call: ``task.enqueue()`` as it is now (``lonnymq_enqueue_task_v1`` writes the
  message and the result row: one statement, one round trip);
* transaction of two: what ``enqueue()`` did before, rebuilt here: ``transaction.atomic()``
  around ``django_lonnymq.enqueue()`` and an ORM insert of the result row (BEGIN, two
  statements, COMMIT: four round trips);
* message only: ``django_lonnymq.enqueue()`` of the same payload, no result row (the floor);
* dedup, new key: ``task.enqueue()`` under ``tasks.dedup(key, on_duplicate="replace")`` with
  a key never used before (``lonnymq_enqueue_task_keyed_v1`` creates the message and result);
* dedup, same key: the same with one key per channel, so all but the first enqueue of a
  channel replace its waiting task (message payload and result row changed in place).

Every round runs each row once on emptied tables, in a rotating order; the table shows the
median microseconds per task and the median of the rounds' ratios to the one-call row. The
database is ``--database-url`` (default postgres://postgres@127.0.0.1:5432/lq_bench_tasks); it
is dropped and recreated.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from . import core

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_tasks"
QUEUE = "bench_tasks"
CHANNELS = 10
ROWS = ["one SQL call", "transaction of two", "message only", "dedup, new key", "dedup, same key"]


def send_report(report_id: int, tenant_id: str, title: str) -> None:
    """The task enqueued (never run here)."""


def django_setup(url: str) -> None:
    import django
    import environ
    from django.conf import settings

    try:
        import django.tasks  # noqa: F401

        apps = ["django.contrib.postgres", "django_lonnymq"]
    except ImportError:
        apps = ["django.contrib.postgres", "django_lonnymq", "django_tasks"]
    settings.configure(
        DATABASES={"default": environ.Env.db_url_config(url)},
        INSTALLED_APPS=apps,
        USE_TZ=True,
        TASKS={
            "default": {
                "BACKEND": "django_lonnymq.tasks.LonnyMQBackend",
                "QUEUES": [QUEUE],
                "OPTIONS": {"CHANNEL_KWARG": "tenant_id"},
            }
        },
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", "django_lonnymq", verbosity=0, skip_checks=True)


def measure(url: str, n: int, rounds: int) -> dict[str, dict[str, float]]:
    from django.db import connection, transaction
    from django.utils import timezone

    from django_lonnymq import enqueue
    from django_lonnymq.models import TaskResultRecord
    from django_lonnymq.tasks import dedup

    try:
        from django.tasks import task
    except ImportError:
        from django_tasks import task

    report: Any = task(queue_name=QUEUE)(send_report)
    admin = psycopg.connect(url, autocommit=True)
    connection.ensure_connection()

    def kwargs(i: int) -> dict[str, Any]:
        return {"report_id": i, "tenant_id": f"tenant-{i % CHANNELS}", "title": "monthly usage report"}

    def one_call() -> None:
        for i in range(n):
            report.enqueue(**kwargs(i))

    def transaction_of_two() -> None:
        for i in range(n):
            args = kwargs(i)
            result_id = str(uuid.uuid4())
            payload = {"task": report.module_path, "result_id": result_id, "backend": "default", "args": [],
                       "kwargs": args}  # fmt: skip
            with transaction.atomic():
                message_id = enqueue(QUEUE, payload, channel=args["tenant_id"])
                TaskResultRecord.objects.create(
                    id=result_id, backend="default", task_path=report.module_path, queue=QUEUE,
                    channel=args["tenant_id"], message_id=message_id, status="READY", args=[], kwargs=args,
                    priority=0, enqueued_at=timezone.now(),
                )  # fmt: skip

    def message_only() -> None:
        for i in range(n):
            args = kwargs(i)
            payload = {"task": report.module_path, "result_id": str(uuid.uuid4()), "backend": "default",
                       "args": [], "kwargs": args}  # fmt: skip
            enqueue(QUEUE, payload, channel=args["tenant_id"])

    def dedup_new_key() -> None:
        for i in range(n):
            with dedup(f"report-{i}", on_duplicate="replace"):
                report.enqueue(**kwargs(i))

    def dedup_same_key() -> None:
        for i in range(n):
            with dedup("report", on_duplicate="replace"):
                report.enqueue(**kwargs(i))

    steps: dict[str, Callable[[], None]] = dict(
        zip(ROWS, [one_call, transaction_of_two, message_only, dedup_new_key, dedup_same_key], strict=True)
    )
    micros: dict[str, list[float]] = {row: [] for row in ROWS}
    ratios: dict[str, list[float]] = {row: [] for row in ROWS}
    for r in range(rounds):
        this: dict[str, float] = {}
        order = ROWS[r % len(ROWS) :] + ROWS[: r % len(ROWS)]
        for row in order:
            admin.execute(
                "TRUNCATE lonnymq_message, lonnymq_channel, lonnymq_wake, lonnymq_task_result, lonnymq_dedup"
                " RESTART IDENTITY CASCADE"
            )
            t0 = time.perf_counter()
            steps[row]()
            this[row] = (time.perf_counter() - t0) / n * 1e6
            micros[row].append(this[row])
        for row in ROWS:
            ratios[row].append(this[row] / this["one SQL call"])
        core.log(f"round {r + 1}/{rounds}: " + ", ".join(f"{row} {this[row]:.0f} us" for row in ROWS))
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
        f"Django Task enqueue, {n:,} per round, {rounds} rounds, autocommit; median us per task, "
        "median of the rounds' ratios to one SQL call (min-max)",
        "",
        "| path                 | us/task | tasks/s | ratio to one SQL call |",
        "|----------------------|---------|---------|-----------------------|",
    ]
    for row, r in result.items():
        ratio = f"{r['ratio']:.2f} ({r['low']:.2f}-{r['high']:.2f})"
        lines.append(f"| {row:<20} | {r['us']:7.0f} | {1e6 / r['us']:7,.0f} | {ratio:<21} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.task_enqueue", description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--tasks", type=int, default=1000, help="enqueues per row and round (default 1,000)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds (default 6)")
    args = ap.parse_args(argv)
    url = args.database_url or DEFAULT_URL
    core.log(f"recreating {url}")
    core.recreate_database(url)
    django_setup(url)
    print(table(measure(url, args.tasks, args.rounds), args.tasks, args.rounds))


if __name__ == "__main__":
    main()
