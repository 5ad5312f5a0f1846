"""Failing handlers through a real worker: exponential backoff then the dead-letter row;
Retry(delay) comes back after the delay; Discard goes straight to the dead letters."""

from __future__ import annotations

from django_lonnymq import api, enqueue
from tests.worker.conftest import describe, wait_until

FAST_RETRY = "tests.worker.settings_fastretry"  # backoff base 0.2 s


def test_failing_handler_retries_with_backoff_then_dead_letters(spawn, db):
    message_id = enqueue("t_fail", {"x": 1}, max_attempts=3)

    # Not --burst: a burst worker stops while the message waits out its backoff.
    worker = spawn("--queue", "t_fail", settings=FAST_RETRY)
    wait_until(lambda: db.dead("t_fail"), 20, "the dead-letter row", worker)
    assert worker.stop() == 0, describe(worker)

    fails = db.events("fail", "t_fail")
    assert [(f["message_id"], f["attempt"]) for f in fails] == [
        (message_id, 1),
        (message_id, 2),
        (message_id, 3),
    ]
    # Backoff with equal jitter: at least half of base * 2 ** (attempt - 1) between attempts.
    gaps = [(b["at"] - a["at"]).total_seconds() for a, b in zip(fails, fails[1:], strict=False)]
    assert gaps[0] >= 0.1 and gaps[1] >= 0.2, f"no backoff between attempts: {gaps}"
    [dead] = db.dead("t_fail")
    assert dead["id"] == message_id
    assert dead["reason"] == "failed"
    assert dead["attempts"] == 3 and dead["max_attempts"] == 3
    assert dead["payload"] == {"x": 1}
    assert "boom on attempt 3" in dead["last_error"], dead["last_error"]
    assert "RuntimeError" in dead["last_error"]
    assert db.messages("t_fail") == []
    stats = worker.stats()
    assert (stats["retried"], stats["dead"], stats["acked"]) == (2, 1, 0), describe(worker)
    assert api.check() == []


def test_retry_with_delay_comes_back_after_the_delay(spawn, db):
    message_id = enqueue("t_retry", {"y": 2})

    worker = spawn("--queue", "t_retry", settings=FAST_RETRY)
    wait_until(lambda: db.events("done", "t_retry"), 20, "the retried delivery", worker)
    assert worker.stop() == 0, describe(worker)

    events = [(d["message_id"], d["attempt"], d["event"]) for d in db.deliveries("t_retry")]
    assert events == [(message_id, 1, "retry"), (message_id, 2, "done")], describe(worker)
    first, second = db.deliveries("t_retry")
    assert (second["at"] - first["at"]).total_seconds() >= 0.2  # Retry(delay=0.2)
    assert db.messages("t_retry") == [] and db.dead("t_retry") == []


def test_discard_dead_letters_at_once(spawn, db):
    message_id = enqueue("t_discard", {"z": 3}, max_attempts=5)

    worker = spawn("--queue", "t_discard", "--burst")
    assert worker.wait(timeout=20) == 0, describe(worker)

    [dead] = db.dead("t_discard")
    assert dead["id"] == message_id
    assert dead["reason"] == "discarded"
    assert dead["attempts"] == 1
    assert dead["last_error"] == "not wanted"
    assert db.messages("t_discard") == []
