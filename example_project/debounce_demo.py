"""The demo's debounce step: one document edited many times is re-indexed once.

Each edit enqueues ``{"document": 42, "revision": n}`` into queue ``reindex`` with
``dedup_key="document-42"``, ``on_duplicate="replace"`` and a 1 s delay, each in its own
transaction, as a view saving the document would. Replace keeps one waiting message and moves
it to 1 s after the last edit, with the last revision. The step waits until that message is
due, runs one burst worker and checks that the handler
(``example_project/tenants/handlers.py``'s ``reindex``) ran once, with the last revision, no
earlier than the last edit's run time. It prints one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUEUE = "reindex"
DOCUMENT = 42


def run_debounce_step(edits: int = 20, delay: float = 1.0, timeout: float = 120) -> list[str]:
    """Edit, wait, drain, verify; returns the problems found (empty: all good)."""
    from django.db import connection, transaction

    from django_lonnymq import enqueue
    from django_lonnymq.api import now_ms
    from example_project.tenants.models import JobRun

    key = f"document-{DOCUMENT}"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT id FROM lonnymq_channel WHERE queue = %s", [QUEUE])
        ids = [row[0] for row in cursor.fetchall()]
        for table in ("lonnymq_message", "lonnymq_dedup", "lonnymq_wake"):
            cursor.execute(f"DELETE FROM {table} WHERE channel_id = ANY(%s)", [ids])
        cursor.execute("DELETE FROM lonnymq_dead_message WHERE queue = %s", [QUEUE])
        cursor.execute("DELETE FROM lonnymq_channel WHERE queue = %s", [QUEUE])
        JobRun.objects.filter(queue=QUEUE).delete()

    message_ids = set()
    for revision in range(1, edits + 1):
        with transaction.atomic():  # one edit, one transaction
            message_ids.add(
                enqueue(
                    QUEUE,
                    {"document": DOCUMENT, "revision": revision},
                    channel="tenant-acme",
                    dedup_key=key,
                    on_duplicate="replace",
                    delay=delay,
                )
            )
        last_edit_ms = now_ms()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT m.dequeue_at FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id"
            " WHERE c.queue = %s",
            [QUEUE],
        )
        due = [row[0] for row in cursor.fetchall()]
    problems = []
    if len(message_ids) != 1 or len(due) != 1:
        problems.append(
            f"{edits} edits left {len(due)} waiting message(s) with ids {sorted(message_ids)}, not one"
        )
    elif due[0] < last_edit_ms + delay * 1000 - 1000:
        problems.append("the debounced message is not due after the last edit")
    while due and now_ms() < max(due):
        time.sleep(0.05)
    command = [sys.executable, str(ROOT / "manage.py"), "run_queue_worker", "--burst", "--queue", QUEUE]
    done = subprocess.run(
        command, cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        problems.append(
            f"reindex worker exited with {done.returncode}: {done.stdout[-500:]}{done.stderr[-500:]}"
        )
    runs = list(JobRun.objects.filter(queue=QUEUE).values_list("message_id", "tenant"))
    if runs != [(next(iter(message_ids)), f"document {DOCUMENT} revision {edits}")]:
        problems.append(f"debounce: expected one run with revision {edits}, got {runs}")
    print(
        f"debounce: {edits} edits of document {DOCUMENT} (dedup_key={key!r}, on_duplicate='replace', "
        f"delay {delay:g} s) ran the re-index {len(runs)} time(s)"
        + (f", with the last revision ({runs[0][1].rsplit(' ', 1)[-1]})" if len(runs) == 1 else "")
    )
    return problems
