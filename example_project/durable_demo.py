"""The demo's durable step: one durable handler per tenant (``checkout`` in
example_project/tenants/handlers.py): a step, a one-second durable sleep, a wait for the
tenant's approval event, another step.

One worker with a single thread serves the queue: every tenant's checkout suspends on its
sleep and then on its wait without holding that thread, so all four get there; the step then
emits each tenant's approval (in one transaction, as a webhook's view would), and checks that
every checkout finished, each step ran exactly once, and nothing is left. It prints one line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUEUE = "checkout"
TENANTS = ("acme", "globex", "initech", "umbrella")


def _suspended_on_approval() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM lonnymq_step s JOIN lonnymq_message m ON m.id = s.message_id"
            " JOIN lonnymq_channel c ON c.id = m.channel_id"
            " WHERE c.queue = %s AND s.name = 'approval' AND NOT s.done AND m.lease_until IS NULL",
            [QUEUE],
        )
        return int(cursor.fetchone()[0])


def _left() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id"
            " WHERE c.queue = %s",
            [QUEUE],
        )
        return int(cursor.fetchone()[0])


def run_durable_step(timeout: float = 60) -> list[str]:
    """Enqueue, let them suspend, emit the approvals, verify; returns the problems found."""
    from django.db import connection, transaction

    from django_lonnymq import api, enqueue
    from example_project.demo import forget_queue
    from example_project.tenants.models import JobRun

    with transaction.atomic(), connection.cursor() as cursor:
        forget_queue(cursor, QUEUE)
        cursor.execute("DELETE FROM lonnymq_event WHERE key LIKE 'demo-approval-%%'")
        JobRun.objects.filter(queue__startswith=f"{QUEUE}:").delete()
    for tenant in TENANTS:
        enqueue(QUEUE, {"order": tenant}, channel=tenant)
    started = time.monotonic()
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "run_queue_worker", "--queue", QUEUE, "--concurrency", "1"],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    problems: list[str] = []
    try:
        deadline = time.monotonic() + timeout
        while _suspended_on_approval() < len(TENANTS) and time.monotonic() < deadline:
            time.sleep(0.2)
        waiting = _suspended_on_approval()
        if waiting < len(TENANTS):
            problems.append(
                f"durable: {waiting} of {len(TENANTS)} checkouts reached their wait in {timeout:.0f}s"
            )
        with transaction.atomic():  # as a webhook's view would: the events commit with its writes
            for tenant in TENANTS:
                api.emit_event(f"demo-approval-{tenant}", {"approved_by": "ops"})
        while _left() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=30)
    if worker.returncode != 0:
        problems.append(f"durable worker exited with {worker.returncode}: {output[-500:]}")
    if _left():
        problems.append(f"durable: {_left()} checkout message(s) left")
    runs = Counter(JobRun.objects.filter(queue__startswith=f"{QUEUE}:").values_list("queue", "tenant"))
    expected = {(f"{QUEUE}:{step}", tenant) for step in ("charge", "provision") for tenant in TENANTS}
    if set(runs) != expected or any(n != 1 for n in runs.values()):
        problems.append(f"durable: steps ran {dict(runs)}, not charge and provision once per tenant")
    print(
        f"durable handlers: one checkout per tenant ({len(TENANTS)}) on one worker thread: each charged "
        f"once, slept 1 s and waited for its approval event without holding the thread, provisioned "
        f"once after the emit ({time.monotonic() - started:.1f}s)"
    )
    return problems
