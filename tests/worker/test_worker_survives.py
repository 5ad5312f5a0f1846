"""A worker survives every database error that is not a lost connection, and says why.

- A queue whose dequeue fails (here: a trigger that raises a numeric overflow on its channel
  rows, as an out-of-range limit once did) is backed off alone: the worker keeps serving its
  other queues, logs the error with the queue, and ``lonnymq_health`` reports the queue.
- A role whose ``statement_timeout`` is 1 ms does not livelock the worker: its own
  connection sets its own timeout, so nothing is cancelled and nothing reconnects.
- A bad ``Retry`` delay fails the message with a clear error; an exception that cannot even
  be printed fails its message like any other.
- A handler thread that dies is noticed: the worker stops and exits with status 1.
"""

from __future__ import annotations

import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from psycopg import sql as pgsql

from django_lonnymq import Item, api, enqueue_many
from django_lonnymq.registry import autodiscover
from django_lonnymq.worker import Worker
from tests.worker.conftest import describe, wait_until

POISON = """
CREATE FUNCTION poison_channel() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'bigint out of range' USING ERRCODE = '22003';
END $$;
CREATE TRIGGER poison_channel BEFORE UPDATE ON lonnymq_channel
    FOR EACH ROW WHEN (NEW.queue = 't_discard') EXECUTE FUNCTION poison_channel();
"""
UNPOISON = (
    "DROP TRIGGER IF EXISTS poison_channel ON lonnymq_channel; DROP FUNCTION IF EXISTS poison_channel();"
)


def test_a_queue_whose_dequeue_fails_is_backed_off_alone_and_health_reports_it(spawn, db):
    enqueue_many("t_discard", [Item({"n": n}) for n in range(3)])
    db.rows(POISON)
    try:
        ids = enqueue_many("t_record", [Item({"n": n}, channel=f"c{n % 3}") for n in range(10)])
        worker = spawn("--queue", "t_discard", "--queue", "t_record", "--concurrency", "2")
        wait_until(lambda: len(db.events("done", "t_record")) >= 10, 30, "t_record served", worker)
        wait_until(
            lambda: "dequeue of queue t_discard failed" in worker.output, 10, "the error logged", worker
        )
        assert worker.alive(), describe(worker)
        assert sorted(d["message_id"] for d in db.events("done", "t_record")) == sorted(ids)
        line = next(li for li in worker.output.splitlines() if "dequeue of queue t_discard failed" in li)
        assert "NumericValueOutOfRange 22003" in line and "other queues go on" in line, line
        assert "Traceback" not in worker.output, worker.output

        with pytest.raises(CommandError, match="dequeue of queue t_discard fails"):
            call_command("lonnymq_health", "--max-dead-tuples", "100000000", "--max-xact-age", "100000")
        assert len(db.messages("t_discard")) == 3  # the probe leased nothing
    finally:
        db.rows(UNPOISON)
    # Once the cause is gone the queue is served again, after its back-off.
    wait_until(lambda: len(db.dead("t_discard")) == 3, 45, "t_discard served again", worker)
    assert "dequeue of queue t_discard works again" in worker.output
    assert worker.stop() == 0, describe(worker)


@pytest.fixture
def role_with_1ms_statement_timeout(db):
    name = f"lq_timeout_{db.scalar('SELECT current_database()')}"[:63]
    ident = pgsql.Identifier(name)
    db.conn.execute(pgsql.SQL("DROP ROLE IF EXISTS {}").format(ident))
    db.conn.execute(pgsql.SQL("CREATE ROLE {} LOGIN").format(ident))
    db.conn.execute(pgsql.SQL("GRANT postgres TO {}").format(ident))  # the app's privileges
    db.conn.execute(pgsql.SQL("ALTER ROLE {} SET statement_timeout = '1ms'").format(ident))
    yield name
    db.conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [name])
    db.conn.execute(pgsql.SQL("DROP ROLE {}").format(ident))


def test_a_role_statement_timeout_of_1ms_does_not_starve_the_worker(
    spawn, db, role_with_1ms_statement_timeout
):
    from django.db import connection

    s = connection.settings_dict
    url = f"postgres://{role_with_1ms_statement_timeout}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    # The role's default really cancels ordinary statements.
    cancelled = db.scalar(
        "SELECT setting FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole, unnest(s.setconfig) setting"
        " WHERE r.rolname = %s",
        [role_with_1ms_statement_timeout],
    )
    assert cancelled == "statement_timeout=1ms"
    enqueue_many("t_noop", [Item({"n": n}, channel=f"c{n % 5}") for n in range(40)])
    worker = spawn("--queue", "t_noop", "--burst", "--concurrency", "2", DATABASE_URL=url)
    assert worker.wait(timeout=60) == 0, describe(worker)
    stats = worker.stats()
    assert stats["acked"] == 40 and stats["reconnects"] == 0, describe(worker)
    assert db.messages("t_noop") == []


def test_a_bad_retry_delay_fails_the_message_with_a_clear_error(spawn, db):
    ids = enqueue_many(
        "t_bad_retry",
        [Item({"delay": d}, max_attempts=1) for d in ("nan", "soon", -5, 1e30)],
    )
    worker = spawn("--queue", "t_bad_retry", "--burst")
    assert worker.wait(timeout=30) == 0, describe(worker)
    dead = {row["id"]: row for row in db.dead("t_bad_retry")}
    assert sorted(dead) == sorted(ids), describe(worker)
    for row in dead.values():
        assert row["reason"] == "failed"
        assert "InvalidArgument: delay must" in row["last_error"], row["last_error"]
    assert worker.stats()["acked"] == 0 and "Traceback" not in worker.output


def test_an_exception_that_cannot_be_printed_fails_its_message_like_any_other(spawn, db):
    (message_id,) = enqueue_many("t_unprintable", [Item({}, max_attempts=1)])
    worker = spawn("--queue", "t_unprintable", "--burst")
    assert worker.wait(timeout=30) == 0, describe(worker)
    assert [row["id"] for row in db.dead("t_unprintable")] == [message_id]
    assert "cannot be shown" in worker.output and "Logging error" not in worker.output, worker.output


def test_a_dead_handler_thread_stops_the_worker_with_status_1(db):
    enqueue_many("t_record", [Item({"n": n}) for n in range(3)])
    autodiscover()  # the test app's handlers, as the worker command finds them
    worker = Worker(["t_record"], concurrency=2, shutdown_timeout=1)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_until(lambda: len(db.events("done", "t_record")) == 3, 20, "the first messages")
    worker.runners.stop(threads=1)  # one handler thread returns: as if it had died
    thread.join(timeout=20)
    assert not thread.is_alive()
    assert worker.exit_code == 1
    assert api.check() == []


def test_a_handler_that_returns_a_generator_fails_its_message_without_running_it(spawn, db):
    ids = [enqueue_many(queue, [Item({}, max_attempts=1)])[0] for queue in ("acc_gen_hidden", "acc_agen_hidden")]
    worker = spawn(
        "--queue", "acc_gen_hidden", "--queue", "acc_agen_hidden", "--burst", settings="tests.worker.settings_extra"
    )  # fmt: skip
    assert worker.wait(timeout=30) == 0, describe(worker)
    dead = db.dead("acc_gen_hidden") + db.dead("acc_agen_hidden")
    assert [row["id"] for row in dead] == ids, describe(worker)
    assert "returned a generator and ran none of its body" in dead[0]["last_error"]
    assert "returned an async generator and ran none of its body" in dead[1]["last_error"]
    assert db.events("body") == [] and worker.stats()["acked"] == 0
