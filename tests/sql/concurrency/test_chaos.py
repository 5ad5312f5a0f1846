"""Chaos: workers killed with SIGKILL every few seconds and one PostgreSQL restart lose nothing.

20k messages (``LONNYMQ_CHAOS_MESSAGES``) over 50 channels with concurrency limits are
processed by 4 ``manage.py run_queue_worker`` processes (--concurrency 4 --batch-size 50
--lease 3s). Every ``LONNYMQ_CHAOS_KILL_EVERY`` seconds (default 2.5) one worker is killed
with SIGKILL and a new one started; once, about a third of the way through, the PostgreSQL
server is restarted. Workers reconnect on their own.

Which server is restarted: the throwaway cluster the test run started itself (no
``DATABASE_URL``: tests/dbserver.py), or, only when the run opts in with
``LONNYMQ_TEST_RESTART_SERVER=1`` (CI does), the local ``pg_ctlcluster`` cluster that
``DATABASE_URL`` names. A server named by ``DATABASE_URL`` without the opt-in is never
restarted: the test fails and says how to opt in, or to leave the restart out with
``LONNYMQ_CHAOS_RESTART=0``.

The run's random choices come from one seed, printed at the start (``chaos: seed N``, shown
with a failure); ``LONNYMQ_CHAOS_SEED=N`` replays it.

At the end: every message was handled (the t_record handler wrote a 'done' row for it), a
message handled twice was first handled by a worker that was then killed, or around the
restart; nothing died; every channel's in_flight and the queue-wide cap's are back to 0; the
checker is clean. Some channels have weights and token buckets, and the queue has a queue-wide
cap of 12 and a bucket.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import connection

from tests.sql.concurrency import sqlcalls as q
from tests.sql.concurrency.chaos import Workers, env_int, reconnect, restarter

# alone: it restarts the server, which every other test on it would see (CONTRIBUTING.md)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.alone]

QUEUE = "t_record"
CHANNELS = [f"chaos-{i:02d}" for i in range(50)]


def test_sigkilled_workers_and_a_database_restart_lose_nothing(
    start_worker: Callable[..., subprocess.Popen[str]],
    connect: Callable[..., psycopg.Connection[Any]],
    recording: None,
) -> None:
    total = env_int("LONNYMQ_CHAOS_MESSAGES", 20_000)
    kill_every = float(os.environ.get("LONNYMQ_CHAOS_KILL_EVERY", "2.5"))
    restart = os.environ.get("LONNYMQ_CHAOS_RESTART", "1") != "0"
    seed = env_int("LONNYMQ_CHAOS_SEED", random.randrange(1 << 30))
    print(f"chaos: seed {seed} (replay with LONNYMQ_CHAOS_SEED={seed})")
    rng = random.Random(seed)

    admin = connect()
    restart_server = restarter(admin) if restart else None
    for i, name in enumerate(CHANNELS):
        q.configure(admin, QUEUE, name, max_concurrency=1 + i % 5)
    # Every limit kind on some channels (weights, token buckets) and a queue-wide cap and
    # bucket: killed workers' queue slots must come back too.
    for i, name in enumerate(CHANNELS[:10]):
        rate = (200, 1000, 10) if i % 2 else (None, None, None)
        admin.execute(
            "SELECT lonnymq_configure_channel_v3(%s, %s, NULL, false, NULL, NULL, %s, %s, %s, %s, false)",
            [QUEUE, name, 1 + i % 3, *rate],
        )
    admin.execute("SELECT lonnymq_configure_queue_v1(%s, 12, false, 5000, 1000, 200, false)", [QUEUE])
    ids: list[int] = []
    for start in range(0, total, 1000):
        n = min(1000, total - start)
        ids += q.enqueue_many(
            admin, QUEUE, [rng.choice(CHANNELS) for _ in range(n)], [{"n": start + k} for k in range(n)],
            max_attempts=50,
        )
    assert len(set(ids)) == total

    workers = Workers(start_worker, QUEUE, batch_size=50)
    for _ in range(4):
        workers.start()

    restart_window: tuple[float, float] | None = None
    deadline = time.monotonic() + env_int("LONNYMQ_CHAOS_TIMEOUT", 400)
    next_kill = time.monotonic() + kill_every
    done = left = 0
    while time.monotonic() < deadline:
        time.sleep(0.25)
        try:
            done = admin.execute(
                "SELECT count(DISTINCT message_id) FROM testapp_delivery WHERE event = 'done' AND queue = %s",
                [QUEUE],
            ).fetchone()[0]
            left = admin.execute("SELECT count(*) FROM lonnymq_message").fetchone()[0]
        except psycopg.OperationalError:
            connection.close()  # the server restarted: Django's connection is gone too
            admin = reconnect(connect)  # and so is ours
            continue
        if done >= total and left == 0:
            break
        if restart and restart_window is None and done >= total // 3:
            assert restart_server is not None
            began = time.time()
            restart_server()
            restart_window = (began, time.time())
            connection.close()  # Django's own connection is gone too
            admin = reconnect(connect)
            print(f"chaos: PostgreSQL restarted in {restart_window[1] - began:.1f}s at {done}/{total}")
            continue
        if time.monotonic() >= next_kill:
            workers.kill(rng.choice(workers.alive()))
            workers.start()
            next_kill = time.monotonic() + kill_every
        workers.fail_if_one_exited()

    stopped_badly = workers.stop()
    print(
        f"chaos: {total} messages, {len(workers.killed)} workers killed, {len(workers.procs)} started, "
        f"restart={'yes' if restart_window else 'no'}; handled {done}, left {left}"
    )
    for pid in workers.started:
        summary = [line for line in workers.output.get(pid, []) if "stopped:" in line]
        if summary:
            print(f"chaos: worker {pid}: {summary[-1].split('stopped: ', 1)[1]}")

    assert done == total and left == 0, (
        f"seed {seed}: {total - done} message(s) never handled, {left} left in the table; last worker output:\n"
        + workers.last_output()
    )
    assert not stopped_badly, {pid: workers.tail(pid) for pid in stopped_badly}

    # Redeliveries: a message handled more than once was first handled by a worker that was
    # killed after that (before its ack went out), or around the restart.
    rows = admin.execute(
        "SELECT message_id, array_agg(pid ORDER BY at), array_agg(extract(epoch FROM at)::float8 ORDER BY at)"
        " FROM testapp_delivery WHERE event = 'done' AND queue = %s GROUP BY message_id HAVING count(*) > 1",
        [QUEUE],
    ).fetchall()
    unexplained = [(m, pids, ats) for m, pids, ats in rows if not workers.explained(pids[0], ats[0], restart_window)]
    print(f"chaos: {len(rows)} message(s) handled more than once, all explained: {not unexplained}")
    assert not unexplained, f"seed {seed}: redelivered without a kill or restart to explain it: {unexplained[:10]}"

    assert admin.execute("SELECT count(*) FROM lonnymq_dead_message").fetchone()[0] == 0
    assert admin.execute(
        "SELECT count(*) FROM lonnymq_channel WHERE queue = %s AND in_flight <> 0", [QUEUE]
    ).fetchone()[0] == 0
    assert admin.execute("SELECT in_flight FROM lonnymq_queue_config WHERE queue = %s", [QUEUE]).fetchone()[0] == 0
    assert q.check(admin, 0) == []
