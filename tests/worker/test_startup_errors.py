"""A worker that cannot work says so clearly: an unknown queue is fatal, a database that is
down is not (it keeps retrying and still stops cleanly)."""

from __future__ import annotations

import signal
import time

from django_lonnymq import enqueue, enqueue_many
from tests.worker.conftest import describe, proxied_database_url, wait_until


def test_queue_without_handler_exits_nonzero_naming_the_queue(spawn, db):
    message_id = enqueue("acc_no_such_handler", {"x": 1})

    worker = spawn("--queue", "t_record", "--queue", "acc_no_such_handler", "--burst")
    code = worker.wait(timeout=20)

    assert code != 0, describe(worker)
    assert "acc_no_such_handler" in worker.output, worker.output
    assert "no handler" in worker.output.lower(), worker.output
    assert "Traceback" not in worker.output, f"a crash, not a clear error:\n{worker.output}"
    # Refused before any work: the message was never leased.
    [message] = db.messages("acc_no_such_handler")
    assert message["id"] == message_id and message["attempts"] == 0 and message["lease_until"] is None


def test_database_down_at_start_is_retried_and_sigterm_exits_0(spawn, db):
    worker = spawn("--queue", "t_record", DATABASE_URL="postgres://postgres@127.0.0.1:1/nowhere")

    wait_until(
        lambda: sum("database unavailable" in line for line in worker.lines) >= 2,
        15,
        "two 'database unavailable' retries",
        worker,
    )
    assert worker.alive(), f"the worker crashed instead of retrying:\n{worker.output}"
    assert "Traceback" not in worker.output, worker.output

    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    code = worker.wait(timeout=10)
    assert code == 0, describe(worker)
    assert time.monotonic() - signalled < 3, f"slow to stop while the database was down:\n{worker.output}"


def test_worker_started_before_the_database_serves_once_it_comes_up(spawn, db, proxy):
    worker = spawn("--queue", "t_record", DATABASE_URL=proxied_database_url(proxy))
    wait_until(
        lambda: any("database unavailable" in line for line in worker.lines),
        15,
        "'database unavailable'",
        worker,
    )
    ids = enqueue_many("t_record", [{"n": n} for n in range(3)])

    proxy.open()  # the database "comes up"
    wait_until(lambda: len(db.events("done", "t_record")) == 3, 20, "the messages to be handled", worker)

    assert worker.stop() == 0, describe(worker)
    assert sorted(d["message_id"] for d in db.events("done", "t_record")) == sorted(ids)
    assert db.messages("t_record") == []
    assert "Traceback" not in worker.output, worker.output
