"""Chaos for workflows: SIGKILLed workers and a PostgreSQL restart release every step exactly once.

200 workflows (``LONNYMQ_WORKFLOW_CHAOS_WORKFLOWS``) of 1 -> 10 -> 1 steps over 8 channels are
run by 4 ``manage.py run_queue_worker`` processes (--concurrency 4 --batch-size 10 --lease 3s);
each step's handler (w_step) records its run and sleeps 0.1 s. About every 2 s one worker is
killed with SIGKILL and a new one started; only a worker that has started processing (it has
recorded a run) is killed, so on a loaded machine, where a new worker may take longer than 2 s
to start, the kills wait for it instead of killing workers that never ran anything. Once, about
a third of the way through, the PostgreSQL server is restarted, by the rule of the general
chaos test (tests/sql/concurrency/test_chaos.py): the throwaway cluster the test run started
itself, or the server of ``DATABASE_URL`` only with ``LONNYMQ_TEST_RESTART_SERVER=1``;
``LONNYMQ_CHAOS_RESTART=0`` leaves the restart out. The seed of the kills is printed;
``LONNYMQ_CHAOS_SEED=N`` replays it.

Releases are counted by the test itself, not by the product's ``releases`` column: a trigger
on ``lonnymq_message`` records every step message put into the message table (a workflow's
start puts its root there, the ack of a step its ready children), with how many of the step's
parents had not succeeded at that moment, in the inserting transaction (a rolled-back release
leaves no row).

At the end: every workflow succeeded; every step ran, and each last step saw its 10 parents'
outputs; every step was put into the message table exactly once, and never before all its
parents had succeeded; a step that ran more than once first ran on a worker that was then
killed, or around the restart; nothing died; at least 5 workers were killed (the steps need at
least 15 s of handler time on 16 slots, and a kill is due every 2 s while a worker that has
started processing is alive); the checker (with its workflow invariants) is clean.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from django_lonnymq import Workflow, api
from tests.sql.concurrency.chaos import Workers, env_int, reconnect, restarter

# alone: it restarts the server, which every other test on it would see (CONTRIBUTING.md)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.alone]

QUEUE = "w_step"
WIDTH = 10  # the middle steps of each workflow
STEP_SECONDS = 0.1
MIN_KILLS = 5

RELEASE_RECORDER = """
CREATE TABLE testapp_step_release (
    id bigserial PRIMARY KEY, message_id bigint NOT NULL, unfinished_parents int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION testapp_record_step_release() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO testapp_step_release (message_id, unfinished_parents)
    SELECT NEW.id, count(*) FILTER (WHERE p.state <> 'succeeded')
      FROM lonnymq_workflow_edge e JOIN lonnymq_workflow_step p ON p.id = e.parent_id
     WHERE e.child_id = NEW.id;
    RETURN NULL;
END $$;
CREATE TRIGGER testapp_record_step_release AFTER INSERT ON lonnymq_message
    FOR EACH ROW WHEN (NEW.dedup_key LIKE 'lonnymq.step:%')
    EXECUTE FUNCTION testapp_record_step_release();
"""

DROP_RELEASE_RECORDER = """
DROP TRIGGER IF EXISTS testapp_record_step_release ON lonnymq_message;
DROP FUNCTION IF EXISTS testapp_record_step_release();
DROP TABLE IF EXISTS testapp_step_release;
"""


@pytest.fixture
def release_recorder(transactional_db: None, dsn: str) -> Iterator[None]:
    """The trigger counting step messages put into the message table; dropped afterwards."""
    with connection.cursor() as cursor:
        cursor.execute(DROP_RELEASE_RECORDER + RELEASE_RECORDER)
    yield
    connection.close()  # it may be a connection from before the server restart
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(DROP_RELEASE_RECORDER)


def test_sigkilled_workers_and_a_database_restart_release_every_step_once(
    start_worker: Callable[..., Any],
    connect: Callable[..., psycopg.Connection[Any]],
    recording: None,
    release_recorder: None,
) -> None:
    flows = env_int("LONNYMQ_WORKFLOW_CHAOS_WORKFLOWS", 200)
    kill_every = float(os.environ.get("LONNYMQ_CHAOS_KILL_EVERY", "2"))
    restart = os.environ.get("LONNYMQ_CHAOS_RESTART", "1") != "0"
    seed = env_int("LONNYMQ_CHAOS_SEED", random.randrange(1 << 30))
    print(f"workflow chaos: seed {seed} (replay with LONNYMQ_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    steps_total = flows * (WIDTH + 2)

    admin = connect()
    restart_server = restarter(admin) if restart else None
    with transaction.atomic():
        for n in range(flows):
            flow = Workflow(f"chaos-{n}", channel=f"tenant-{n % 8}")
            root = flow.step(QUEUE, {"seconds": STEP_SECONDS}, name="root", max_attempts=50)
            middle = [
                flow.step(QUEUE, {"seconds": STEP_SECONDS}, name=f"m{i}", after=[root], max_attempts=50)
                for i in range(WIDTH)
            ]
            flow.step(QUEUE, {"seconds": STEP_SECONDS}, name="last", after=middle, max_attempts=50)
            flow.start()

    workers = Workers(start_worker, QUEUE, batch_size=10)
    for _ in range(4):
        workers.start()

    began = time.monotonic()
    restart_window: tuple[float, float] | None = None
    deadline = began + env_int("LONNYMQ_WORKFLOW_CHAOS_TIMEOUT", 600)
    next_kill = began + kill_every
    succeeded = 0
    while time.monotonic() < deadline:
        time.sleep(0.25)
        try:
            succeeded = admin.execute(
                "SELECT count(*) FROM lonnymq_workflow_step WHERE state = 'succeeded'"
            ).fetchone()[0]
            if succeeded >= steps_total:
                break
            alive = workers.alive()
            # A worker has started processing once it has recorded a run.
            processing = {
                pid for (pid,) in admin.execute(
                    "SELECT DISTINCT pid FROM testapp_delivery WHERE pid = ANY (%s)", [[p.pid for p in alive]]
                ).fetchall()
            }
        except psycopg.OperationalError:
            connection.close()  # the server restarted: Django's connection is gone too
            admin = reconnect(connect)  # and so is ours
            continue
        if restart and restart_window is None and succeeded >= steps_total // 3:
            assert restart_server is not None
            at = time.time()
            restart_server()
            restart_window = (at, time.time())
            connection.close()
            admin = reconnect(connect)
            print(f"workflow chaos: PostgreSQL restarted in {restart_window[1] - at:.1f}s at {succeeded}/{steps_total}")
            continue
        victims = [p for p in alive if p.pid in processing]
        if time.monotonic() >= next_kill and victims:
            workers.kill(rng.choice(victims))
            workers.start()
            next_kill = time.monotonic() + kill_every
        workers.fail_if_one_exited()
    elapsed = time.monotonic() - began

    stopped_badly = workers.stop()
    starts = [workers.serving[pid] - at for pid, at in workers.started.items() if pid in workers.serving] or [0.0]
    print(
        f"workflow chaos: {flows} workflows ({steps_total} steps) in {elapsed:.1f}s, "
        f"{len(workers.killed)} workers killed, {len(workers.procs)} started, "
        f"restart={'yes' if restart_window else 'no'}; a worker took {statistics.median(starts):.1f}s"
        f" (median, max {max(starts):.1f}s) to start serving"
    )

    states = dict(admin.execute("SELECT state, count(*) FROM lonnymq_workflow GROUP BY state").fetchall())
    assert states == {"succeeded": flows}, (
        f"seed {seed}: {states} after {len(workers.killed)} kills; last worker output:\n"
        + workers.last_output()
    )
    assert not stopped_badly, {pid: workers.tail(pid) for pid in stopped_badly}
    assert admin.execute("SELECT count(*) FROM lonnymq_message").fetchone()[0] == 0
    assert admin.execute("SELECT count(*) FROM lonnymq_dead_message").fetchone()[0] == 0

    # Releases: each step was put into the message table once, when its parents had all succeeded.
    steps = [row[0] for row in admin.execute("SELECT id FROM lonnymq_workflow_step ORDER BY id").fetchall()]
    assert len(steps) == steps_total
    released = dict(
        admin.execute("SELECT message_id, count(*) FROM testapp_step_release GROUP BY message_id").fetchall()
    )
    assert set(released) == set(steps), "every step was released"
    twice_released = {step: n for step, n in released.items() if n != 1}
    assert twice_released == {}, f"seed {seed}: steps released more than once: {list(twice_released.items())[:10]}"
    early = admin.execute("SELECT message_id FROM testapp_step_release WHERE unfinished_parents > 0").fetchall()
    assert early == [], f"seed {seed}: released before all parents succeeded: {early[:10]}"
    assert admin.execute("SELECT array_agg(DISTINCT releases) FROM lonnymq_workflow_step").fetchone()[0] == [1]

    # Runs: every step ran; each last step saw its parents' outputs.
    runs = admin.execute(
        "SELECT message_id, array_agg(pid ORDER BY at, id), array_agg(extract(epoch FROM at)::float8 ORDER BY at, id)"
        " FROM testapp_delivery WHERE event = 'done' AND queue = %s GROUP BY message_id",
        [QUEUE],
    ).fetchall()
    assert {row[0] for row in runs} == set(steps), "every step ran"
    parents_seen = admin.execute(
        "SELECT DISTINCT (SELECT count(*) FROM jsonb_object_keys(payload->'parents')) FROM testapp_delivery"
        " WHERE event = 'done' AND payload->>'step' = 'last'"
    ).fetchall()
    assert parents_seen == [(WIDTH,)], f"a last step saw {parents_seen} parent outputs"

    # Repeated runs: the first run was on a worker killed after it, or around the restart.
    repeated = [row for row in runs if len(row[1]) > 1]
    unexplained = [(m, pids, ats) for m, pids, ats in repeated if not workers.explained(pids[0], ats[0], restart_window)]
    print(f"workflow chaos: {len(repeated)} of {steps_total} steps ran more than once, all explained: {not unexplained}")
    assert not unexplained, f"seed {seed}: ran again without a kill or restart to explain it: {unexplained[:10]}"

    assert len(workers.killed) >= MIN_KILLS, (
        f"only {len(workers.killed)} kills in {elapsed:.1f}s: the run did not test what it should"
    )
    connection.close()
    assert api.check(grace=0) == []
