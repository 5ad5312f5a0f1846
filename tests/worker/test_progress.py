"""message.progress() in real worker processes: 1,000 reports in a second write a bounded
number of rows (counted by a trigger on the table), a report shows while the handler still
runs, and the last one is there after the ack."""

from __future__ import annotations

import math

import pytest

from django_lonnymq import api, enqueue
from django_lonnymq.progress import running_progress

from .conftest import describe, wait_until

SETTINGS = "tests.worker.settings_asks"
INTERVAL = 0.5  # LONNYMQ_PROGRESS_INTERVAL's default


@pytest.fixture
def writes(db):
    """Every row the workers write into lonnymq_progress, counted by a trigger (dropped after)."""
    db.conn.execute("CREATE TABLE acc_progress_write (message_id bigint, done double precision)")
    db.conn.execute(
        "CREATE FUNCTION acc_progress_count() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " INSERT INTO acc_progress_write VALUES (NEW.message_id, NEW.done); RETURN NEW; END $$"
    )
    db.conn.execute(
        "CREATE TRIGGER acc_progress_count AFTER INSERT OR UPDATE ON lonnymq_progress"
        " FOR EACH ROW EXECUTE FUNCTION acc_progress_count()"
    )
    yield lambda: db.rows("SELECT message_id, done FROM acc_progress_write")
    db.conn.execute("DROP TRIGGER acc_progress_count ON lonnymq_progress")
    db.conn.execute("DROP FUNCTION acc_progress_count()")
    db.conn.execute("DROP TABLE acc_progress_write")


def test_a_thousand_reports_in_a_second_write_a_bounded_number_of_rows(spawn, db, writes):
    msg = enqueue("acc_progress_burst", {})
    worker = spawn("--queue", "acc_progress_burst", "--burst", settings=SETTINGS)
    assert worker.wait(timeout=60) == 0, describe(worker)
    status = api.message_status(msg)
    assert status.state == "finished", describe(worker)
    assert (status.progress.done, status.progress.total) == (1000.0, 1000.0)
    seconds = float(status.progress.note)  # how long the handler reported for
    written = writes()
    # One write per interval while it reports (the first at once), and its last report.
    bound = math.ceil(seconds / INTERVAL) + 2
    assert 1 <= len(written) <= bound, (len(written), seconds, written)
    assert written[-1]["done"] == 1000.0 and {w["message_id"] for w in written} == {msg}


def test_a_report_shows_while_the_handler_runs_and_the_last_one_after_its_ack(spawn, db):
    msg = enqueue("acc_progress_hold", {"hold": 4})
    other = enqueue("acc_progress_hold", {"hold": 0}, channel="b")
    worker = spawn("--queue", "acc_progress_hold", "--concurrency", "2", settings=SETTINGS)

    def half_shown():
        status = api.message_status(msg)
        return status is not None and status.state == "running" and status.progress is not None

    wait_until(half_shown, 10, "the first report of the running message", worker)
    running = api.message_status(msg)
    assert (running.progress.done, running.progress.total, running.progress.note) == (1.0, 2.0, "half")
    assert running.progress.percent == 50
    # The dashboard's list: the running message's report, not the finished one's.
    wait_until(lambda: api.message_status(other).state == "finished", 10, "the short message", worker)
    assert api.message_status(other).progress.note == "all"
    assert [(m, c, p.note) for m, c, p in running_progress("acc_progress_hold")] == [(msg, "default", "half")]
    # Its last report is written before its ack: finished, all done.
    wait_until(lambda: api.message_status(msg).state == "finished", 20, "the long message", worker)
    assert api.message_status(msg).progress.note == "all"
