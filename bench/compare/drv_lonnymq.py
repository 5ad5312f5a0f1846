"""django-lonnymq through its public API: ``enqueue`` / ``enqueue_many`` from Django (autocommit,
so one call is one transaction) and ``manage.py run_queue_worker --burst`` as the worker.

Runs with the project's own virtualenv (/work/main/.venv) from /work/main.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from driverlib import channel_of, parser, payload, report, wait_ready

# BENCH_LONNYMQ_ROOT points at another checkout (e.g. a prototype copy in /tmp) to measure it
# with the same harness; its migrations are applied by `setup`.
HARNESS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOT = os.environ.get("BENCH_LONNYMQ_ROOT") or HARNESS
QUEUE = "bench_noop"
SETTINGS = "bench.compare.lonnymq_settings"


def _env(dsn: str) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = dsn.replace("postgresql://", "postgres://", 1)
    env["DJANGO_SETTINGS_MODULE"] = SETTINGS
    env["PYTHONPATH"] = os.pathsep.join([ROOT, HARNESS, env.get("PYTHONPATH", "")])
    return env


def _django(dsn: str) -> None:
    os.environ.update(_env(dsn))
    for path in (HARNESS, ROOT):  # ROOT first: a prototype's django_lonnymq wins
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)
    import django

    django.setup()


def main() -> None:
    args = parser().parse_args()
    if args.command == "setup":
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=_env(args.dsn), check=True
        )
        return
    if args.command == "worker":
        concurrency = args.concurrency or args.batch
        argv = [
            sys.executable,
            os.path.join(ROOT, "manage.py"),
            "run_queue_worker",
            "--queue",
            QUEUE,
            "--concurrency",
            str(concurrency),
            "--batch-size",
            str(args.batch),
        ]
        if args.burst:
            argv.append("--burst")
        os.chdir(ROOT)
        os.execve(sys.executable, argv, _env(args.dsn))

    _django(args.dsn)
    from django.db import connection

    from django_lonnymq import Item, enqueue, enqueue_many

    if args.command == "reset":
        with connection.cursor() as cur:
            cur.execute(
                "TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_dead_message, lonnymq_channel, lonnymq_wake "
                "RESTART IDENTITY CASCADE"
            )
    elif args.command == "enqueue":
        n, c = args.n, args.channels
        connection.ensure_connection()
        t0 = time.perf_counter()
        if args.mode == "single":
            for i in range(n):
                enqueue(QUEUE, payload(i), channel=channel_of(i, c))
        else:
            for start in range(0, n, args.batch):
                enqueue_many(
                    QUEUE,
                    [
                        Item(payload(i), channel=channel_of(i, c))
                        for i in range(start, min(start + args.batch, n))
                    ],
                )
        report(seconds=time.perf_counter() - t0, n=n)
    elif args.command == "produce":
        connection.ensure_connection()

        def send(i: int, **kw) -> None:
            enqueue(QUEUE, payload(i, **kw), channel=channel_of(i, args.channels))

        warm = wait_ready(args.ready_file, lambda i: send(i, warmup=True))
        for i in range(args.n):
            send(i, measured=True)
            time.sleep(args.interval)
        report(n=args.n, warmup=warm)


if __name__ == "__main__":
    main()
