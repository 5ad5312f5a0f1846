"""The admin at size: ``python -m bench.admin_at_size``.

Builds (``--build``) a database holding a big backlog, then requests every admin page, each of
its list filters, ``/metrics/lonnymq/``, and runs ``manage.py lonnymq_stats`` and
``lonnymq_health``, each ``--repeat`` times (Django's test ``Client``, logged in as a
superuser, in this process), and prints the median time of each in seconds. A line over one
second is marked ``SLOW``.

The backlog is written with ``INSERT ... SELECT generate_series`` (a minute where
``enqueue_many`` takes many): ``--channels`` channels (default 100,000) in three queues
(``bulk`` holds all but 1,000 of them, ``mail`` 900, ``small`` 100; every 1,000th channel is
paused), ``--messages`` messages (default 1,000,000) spread evenly over them, one in ten
scheduled an hour ahead, the first ``--channels`` / 10 of them in flight (one per channel,
with its slot taken), and ``--dead`` dead letters (default 100,000). The rows keep the
scheduler's invariants (a channel with ready messages is in the eligible index, ``in_flight``
counts its leases), so the workers' statements would find a queue they could run; the
bench runs none. Then ``VACUUM ANALYZE``, as autovacuum would.

The database is ``--database-url`` (default postgres://postgres@127.0.0.1:5432/lq_bench_admin),
dropped and recreated by ``--build``; without ``--build`` the bench measures what is there.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import psycopg

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_admin"
SUPERUSER = "bench-admin"

FILL = """
INSERT INTO lonnymq_channel (queue, name, paused, in_flight, next_dequeue_at, turn)
SELECT CASE WHEN i <= %(channels)s - 1000 THEN 'bulk' WHEN i <= %(channels)s - 100 THEN 'mail'
            ELSE 'small' END,
       'tenant-' || i, i %% 1000 = 0, CASE WHEN i <= %(leased)s THEN 1 ELSE 0 END,
       CASE WHEN i %% 1000 = 0 THEN NULL ELSE lonnymq_now_ms_v1() END, i
FROM generate_series(1, %(channels)s) AS i;

INSERT INTO lonnymq_message (channel_id, payload, dequeue_at, max_attempts, lease_until,
                             lease_token, leased_by, slot_taken, attempts)
SELECT c.id, jsonb_build_object('n', i),
       lonnymq_now_ms_v1() + CASE WHEN i %% 10 = 0 THEN 3600000 ELSE 0 END, 25,
       CASE WHEN i <= %(leased)s THEN lonnymq_now_ms_v1() + 600000 END,
       CASE WHEN i <= %(leased)s THEN gen_random_uuid() END,
       CASE WHEN i <= %(leased)s THEN 'bench-worker' END,
       i <= %(leased)s, CASE WHEN i <= %(leased)s THEN 1 ELSE 0 END
FROM generate_series(1, %(messages)s) AS i
JOIN lonnymq_channel c ON c.id = (SELECT min(id) FROM lonnymq_channel) + (i - 1) %% %(channels)s;

INSERT INTO lonnymq_dead_message (id, channel_id, queue, channel, payload, attempts, max_attempts,
                                  enqueued_at, died_at, reason, last_error)
SELECT nextval('lonnymq_message_id_seq'), c.id, c.queue, c.name, jsonb_build_object('n', i), 25, 25,
       now() - interval '1 day', now() - (i %% 86400) * interval '1 second',
       (ARRAY['failed', 'discarded', 'lease_expired'])[1 + i %% 3], 'ValueError: bench ' || i
FROM generate_series(1, %(dead)s) AS i
JOIN lonnymq_channel c ON c.id = (SELECT min(id) FROM lonnymq_channel) + (i - 1) %% %(channels)s;
"""


def build(url: str, channels: int, messages: int, dead: int) -> None:
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    admin_url = psycopg.conninfo.make_conninfo(url, dbname="postgres")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    subprocess.run([sys.executable, "-m", "django", "migrate", "-v0"], check=True, env=env)
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.transaction():
            params = {"channels": channels, "messages": messages, "dead": dead, "leased": channels // 10}
            for statement in FILL.split(";\n"):
                if statement.strip():
                    conn.execute(statement, params)  # type: ignore[arg-type]
        conn.execute("VACUUM ANALYZE")
    print(
        f"built {channels:,} channels, {messages:,} messages, {dead:,} dead letters "
        f"in {time.monotonic() - started:.0f} s",
        flush=True,
    )


def pages() -> list[tuple[str, str]]:
    """(label, admin URL) of every page and filter measured."""
    from django_lonnymq.models import Channel, Plan

    some = Channel.objects.filter(queue="bulk").order_by("id").values_list("id", flat=True).first()
    plan = Plan.objects.values_list("id", flat=True).first()
    base = "/admin/django_lonnymq/"
    found = [
        ("dashboard", f"{base}channel/dashboard/"),
        ("dashboard ?queue=small", f"{base}channel/dashboard/?queue=small"),
        ("channels", f"{base}channel/"),
        ("channels ?queue=bulk", f"{base}channel/?queue=bulk"),
        ("channels ?queue=small", f"{base}channel/?queue=small"),
        ("channels ?paused=1", f"{base}channel/?paused__exact=1"),
        ("channels ?plan", f"{base}channel/?plan__id__exact={plan or 1}"),
        ("channels ?q=tenant-99", f"{base}channel/?q=tenant-99"),
        ("channels page 500", f"{base}channel/?p=500"),
        ("channel change", f"{base}channel/{some}/change/"),
        ("messages", f"{base}message/"),
        ("messages ?queue=bulk", f"{base}message/?queue=bulk"),
        ("messages ?queue=small", f"{base}message/?queue=small"),
        ("messages ?channel", f"{base}message/?channel={some}"),
        ("messages ?queue&channel", f"{base}message/?queue=bulk&channel={some}"),
        ("messages ?state=ready", f"{base}message/?state=ready"),
        ("messages ?state=scheduled", f"{base}message/?state=scheduled"),
        ("messages ?state=paused", f"{base}message/?state=paused"),
        ("messages ?state=in_flight", f"{base}message/?state=in_flight"),
        ("messages ?queue=bulk&state=paused", f"{base}message/?queue=bulk&state=paused"),
        ("messages ?q=<id>", f"{base}message/?q=1000"),
        ("messages page 100", f"{base}message/?p=100"),
        ("dead letters", f"{base}deadmessage/"),
        ("dead ?queue=bulk", f"{base}deadmessage/?queue=bulk"),
        ("dead ?queue=small", f"{base}deadmessage/?queue=small"),
        ("dead ?queue&channel_name", f"{base}deadmessage/?queue=bulk&channel_name=tenant-{some}"),
        ("dead ?reason=failed", f"{base}deadmessage/?reason__exact=failed"),
        ("dead ?queue=bulk&reason", f"{base}deadmessage/?queue=bulk&reason__exact=discarded"),
        ("workers", f"{base}worker/"),
        ("workers ?state=alive", f"{base}worker/?state=alive"),
        ("schedules", f"{base}schedule/"),
        ("queue limits", f"{base}queueconfig/"),
        ("plans", f"{base}plan/"),
        ("workflows", f"{base}workflowrecord/"),
        ("subscriptions", f"{base}subscription/"),
        ("unrouted", f"{base}unrouted/"),
        ("/metrics/lonnymq/", "/metrics/lonnymq/"),
    ]
    return found


def timed(call: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(repeat: int, only: str = "") -> list[tuple[str, float]]:
    from django.contrib.auth import get_user_model
    from django.core.management import CommandError, call_command
    from django.test import Client

    user_model = get_user_model()
    user = user_model.objects.filter(username=SUPERUSER).first()
    if user is None:
        user = user_model.objects.create_superuser(SUPERUSER, "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    results = []
    for label, url in pages():
        if only not in label:
            continue

        def get(url: str = url) -> None:
            response = client.get(url)
            if response.status_code != 200:
                raise SystemExit(f"{url}: HTTP {response.status_code}")

        results.append((label, timed(get, repeat)))
    for command in ("lonnymq_stats", "lonnymq_health"):
        if only not in f"manage.py {command}":
            continue

        def run(command: str = command) -> None:
            try:
                call_command(command, stdout=io.StringIO(), stderr=io.StringIO())
            except CommandError:
                pass  # lonnymq_health fails when no worker serves the backlog: still measured

        results.append((f"manage.py {command}", timed(run, repeat)))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--build", action="store_true", help="drop, recreate and fill the database")
    parser.add_argument("--channels", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--dead", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="", help="measure only the lines whose label contains this")
    args = parser.parse_args()
    if args.channels < 2_000:
        parser.error("--channels must be at least 2,000 (three queues)")
    if args.build:
        build(args.database_url, args.channels, args.messages, args.dead)
    os.environ["DATABASE_URL"] = args.database_url
    os.environ["DJANGO_DEBUG"] = "false"  # no query log in memory
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()
    from django.conf import settings

    settings.ALLOWED_HOSTS = ["*"]
    results = measure(args.repeat, args.only)
    width = max(len(label) for label, _ in results)
    print(f"{'page / command':<{width}}  median of {args.repeat} (s)")
    for label, seconds in results:
        print(f"{label:<{width}}  {seconds:8.3f}{'  SLOW' if seconds >= 1 else ''}")


if __name__ == "__main__":
    main()
