"""The demo's workflow step: one workflow per tenant, fetch -> 3 parse -> merge.

Each tenant's workflow starts in one transaction with a row of the project (as a view would),
one burst worker runs the three queues, and the step checks that every workflow succeeded,
every step ran once, and each merge added up its parts' outputs to the fetched row count.
It prints one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUEUES = ("wf_fetch", "wf_parse", "wf_merge")
TENANTS = {"acme": 1000, "globex": 250, "initech": 77, "umbrella": 12}
PARTS = 3


def run_workflow_step(timeout: float = 120) -> list[str]:
    """Start, drain, verify; returns the problems found (empty: all good)."""
    from django.db import connection, transaction

    from django_lonnymq import Workflow, api, chord
    from example_project.tenants.models import JobRun

    with transaction.atomic(), connection.cursor() as cursor:
        for queue in QUEUES:
            cursor.execute("SELECT id FROM lonnymq_channel WHERE queue = %s", [queue])
            ids = [row[0] for row in cursor.fetchall()]
            for table in ("lonnymq_message", "lonnymq_dedup", "lonnymq_wake"):
                cursor.execute(f"DELETE FROM {table} WHERE channel_id = ANY(%s)", [ids])
            cursor.execute("DELETE FROM lonnymq_dead_message WHERE queue = %s", [queue])
        cursor.execute("DELETE FROM lonnymq_workflow WHERE name = 'demo-import'")
        JobRun.objects.filter(queue__in=QUEUES).delete()
    started: dict[str, int] = {}
    for tenant, rows in TENANTS.items():
        with transaction.atomic():  # as a view would: the workflow commits with the upload
            flow = Workflow("demo-import", channel=tenant)
            fetch = flow.step("wf_fetch", {"rows": rows}, name="fetch")
            parts = [
                flow.step("wf_parse", {"part": i, "parts": PARTS}, name=f"parse-{i}", after=[fetch])
                for i in range(PARTS)
            ]
            chord(flow, parts, {"queue": "wf_merge", "payload": {}, "name": "merge"})
            started[tenant] = flow.start()
    command = [sys.executable, str(ROOT / "manage.py"), "run_queue_worker", "--burst", "--concurrency", "4"]
    for queue in QUEUES:
        command += ["--queue", queue]
    done = subprocess.run(
        command, cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=timeout, check=False
    )
    problems = []
    if done.returncode != 0:
        problems.append(
            f"workflow worker exited with {done.returncode}: {done.stdout[-500:]}{done.stderr[-500:]}"
        )
    runs = Counter(JobRun.objects.filter(queue__in=QUEUES).values_list("message_id", flat=True))
    if any(n != 1 for n in runs.values()) or len(runs) != len(TENANTS) * (PARTS + 2):
        problems.append(f"workflow steps ran {sum(runs.values())} times for {len(runs)} steps, not once each")
    merged = {}
    for tenant, workflow_id in started.items():
        info = api.workflow(workflow_id)
        if info.state != "succeeded":
            problems.append(f"{tenant}'s workflow {workflow_id} is {info.state}, not succeeded")
            continue
        merged[tenant] = info.step("merge").output["rows"]
        if merged[tenant] != TENANTS[tenant]:
            problems.append(f"{tenant}'s merge counted {merged[tenant]} rows, not {TENANTS[tenant]}")
    print(
        f"workflows: one per tenant (fetch -> {PARTS} parse -> merge, {len(TENANTS) * (PARTS + 2)} steps), "
        f"each step once, merges = {merged}"
    )
    return problems
