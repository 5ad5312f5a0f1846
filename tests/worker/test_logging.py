"""The worker logs through ``logging``: timestamps by default, the format a setting, and one
line per dead-lettered message with its reason."""

from __future__ import annotations

import re

from django_lonnymq.api import enqueue
from tests.worker.conftest import describe

STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING|ERROR) django_lonnymq\.")


def test_dead_letters_one_line_each_with_timestamps(spawn, db):
    discarded = [enqueue("t_discard", {"n": n}, channel="acme") for n in range(2)]
    failed = enqueue("t_fail", {"n": 9}, channel="globex", max_attempts=1)

    worker = spawn("--queue", "t_discard", "--queue", "t_fail", "--burst")
    assert worker.wait(timeout=30) == 0, describe(worker)

    logged = [line for line in worker.lines if "django_lonnymq" in line]
    assert logged and all(STAMP.match(line) for line in logged), describe(worker)
    dead = [line for line in worker.lines if "dead-lettered" in line]
    assert len(dead) == 3, describe(worker)
    for message_id in discarded:
        (line,) = [x for x in dead if f"message {message_id} of t_discard/acme " in x]
        assert "WARNING" in line and "(reason discarded, attempt 1 of 5): not wanted" in line
    (line,) = [x for x in dead if f"message {failed} of t_fail/globex " in x]
    assert "(reason failed, attempt 1 of 1): RuntimeError: boom on attempt 1" in line
    assert {d["id"] for d in db.dead("t_discard")} == set(discarded)


def test_without_project_logging_the_worker_adds_its_console_handler(spawn, db):
    message_id = enqueue("t_discard", {"n": 1})

    worker = spawn("--queue", "t_discard", "--burst", settings="tests.worker.settings_nologging")
    assert worker.wait(timeout=30) == 0, describe(worker)

    assert f"LQ|WARNING|django_lonnymq.worker|message {message_id} of t_discard/default dead-lettered" in (
        worker.output
    ), describe(worker)
    # INFO reaches the console too (the worker's own start and stop lines are the command's).
    assert any(line.startswith("LQ|INFO|django_lonnymq.") for line in worker.lines), describe(worker)


def test_the_start_and_the_stop_summary_are_printed_once(spawn, db):
    """run_queue_worker prints its start line and stop summary itself; the worker's log (INFO,
    on the console here) does not repeat them."""
    enqueue("t_discard", {"n": 1})
    worker = spawn("--queue", "t_discard", "--burst")
    assert worker.wait(timeout=30) == 0, describe(worker)
    assert len([line for line in worker.lines if " stopped: " in line]) == 1, describe(worker)
    assert len([line for line in worker.lines if "queues=t_discard" in line or " serving " in line]) == 1, (
        describe(worker)
    )
