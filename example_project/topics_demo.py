"""The demo's topic step: one event type (``video.uploaded``) consumed by two groups.

``example_project/tenants/handlers.py`` declares the groups (``subscribe(...)``, queues
``thumbnails`` and ``notify``); the step writes the declarations, publishes events over the
tenants in one transaction, runs one burst worker for both queues and checks that each group
handled each event once. It prints one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPIC = "video.uploaded"
GROUPS = ("notify", "thumbnails")
TENANTS = ("acme", "globex", "initech", "umbrella")


def run_topic_step(events: int = 40, timeout: float = 120) -> list[str]:
    """Publish, drain, verify; returns the problems found (empty: all good)."""
    from django.db import connection, transaction

    from django_lonnymq import Event, publish_many
    from django_lonnymq.registry import autodiscover
    from django_lonnymq.topics import sync_subscriptions
    from example_project.tenants.models import JobRun

    autodiscover()
    sync_subscriptions()
    with transaction.atomic(), connection.cursor() as cursor:
        for queue in GROUPS:
            cursor.execute("SELECT id FROM lonnymq_channel WHERE queue = %s", [queue])
            ids = [row[0] for row in cursor.fetchall()]
            for table in ("lonnymq_message", "lonnymq_dedup", "lonnymq_wake"):
                cursor.execute(f"DELETE FROM {table} WHERE channel_id = ANY(%s)", [ids])
            cursor.execute("DELETE FROM lonnymq_dead_message WHERE queue = %s", [queue])
            cursor.execute("DELETE FROM lonnymq_channel WHERE queue = %s", [queue])
        JobRun.objects.filter(queue__in=GROUPS).delete()
    with transaction.atomic():  # as a view would: the events commit with the upload
        ids = publish_many(TOPIC, [Event({"video": n}, key=TENANTS[n % len(TENANTS)]) for n in range(events)])
    command = [sys.executable, str(ROOT / "manage.py"), "run_queue_worker", "--burst", "--concurrency", "4"]
    for queue in GROUPS:
        command += ["--queue", queue]
    done = subprocess.run(
        command, cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=timeout, check=False
    )
    problems = []
    if done.returncode != 0:
        problems.append(
            f"topic worker exited with {done.returncode}: {done.stdout[-500:]}{done.stderr[-500:]}"
        )
    handled = Counter(JobRun.objects.filter(queue__in=GROUPS).values_list("queue", "message_id"))
    per_group = Counter(queue for queue, _ in handled)
    if any(len(row) != len(GROUPS) for row in ids):
        problems.append(f"publish reached {len({len(r) for r in ids})} group count(s), not {len(GROUPS)}")
    if any(n != 1 for n in handled.values()):
        problems.append("a topic message was handled more than once")
    if any(per_group[g] != events for g in GROUPS):
        problems.append(f"groups handled {dict(per_group)}, not {events} each")
    print(
        f"topic {TOPIC!r}: {events} events published in one transaction, handled once by each of "
        f"{len(GROUPS)} groups ({', '.join(f'{g} {per_group[g]}' for g in GROUPS)}), keys = tenants"
    )
    return problems
