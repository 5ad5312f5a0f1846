"""Debounce and throttle end to end: enqueues spread over time, then a real drain
(``testing.drain()``, a worker on its own connection) runs what is due. Times come from the
database (``dequeue_at``, ``lonnymq_now_ms_v1()``, the handler's ``clock_timestamp()``), and no
assertion depends on how fast this machine runs the loop.
"""

from __future__ import annotations

import time

import pytest

from django_lonnymq import enqueue
from django_lonnymq.testing import drain
from tests.harness.helpers import db_now_ms, message_row, rows

pytestmark = pytest.mark.django_db(transaction=True)

EDITS = 50
SPREAD_S = 2.0
DELAY_S = 1.0


def deliveries() -> list[dict]:
    return rows(
        "SELECT message_id, payload, (extract(epoch FROM at) * 1000)::bigint AS at_ms"
        " FROM testapp_delivery WHERE queue = 't_record' ORDER BY at"
    )


def wait_until_due(dequeue_at: int) -> None:
    while db_now_ms() < dequeue_at:
        time.sleep(0.05)


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_debounce_fifty_enqueues_over_two_seconds_run_once_after_the_last_with_its_payload(recording):
    ids, dues = [], []
    for n in range(EDITS):
        before = db_now_ms()
        ids.append(
            enqueue(
                "t_record", {"n": n}, channel="doc", dedup_key="doc-1", on_duplicate="replace", delay=DELAY_S
            )
        )
        after = db_now_ms()
        due = message_row(ids[-1])["dequeue_at"]
        # Each enqueue moved the one message to its own time + the delay.
        assert before + DELAY_S * 1000 <= due <= after + DELAY_S * 1000
        dues.append(due)
        time.sleep(SPREAD_S / EDITS)
    last_before = before
    assert set(ids) == {ids[0]}, "the key got more than one message"
    assert dues == sorted(dues) and dues[-1] > dues[0]
    wait_until_due(dues[-1])
    assert drain("t_record").acked == 1
    [run] = deliveries()
    assert (run["message_id"], run["payload"]) == (ids[0], {"n": EDITS - 1})
    assert run["at_ms"] >= dues[-1] >= last_before + DELAY_S * 1000  # a second after the last enqueue
    assert message_row(ids[0]) is None


def test_throttle_keeps_the_first_run_time_and_runs_the_last_payload(recording):
    first = enqueue(
        "t_record", {"n": 0}, channel="user-7", dedup_key="digest-7", on_duplicate="update", delay=DELAY_S
    )
    due = message_row(first)["dequeue_at"]
    for n in range(1, 10):
        assert enqueue("t_record", {"n": n}, channel="user-7", dedup_key="digest-7", on_duplicate="update",
                       delay=DELAY_S) == first  # fmt: skip
        assert message_row(first)["dequeue_at"] == due
    wait_until_due(due)
    assert drain("t_record").acked == 1
    [run] = deliveries()
    assert (run["message_id"], run["payload"]) == (first, {"n": 9})
    assert run["at_ms"] >= due
    # After it ran, the next enqueue starts a new period with its own run time.
    before = db_now_ms()
    later = enqueue(
        "t_record", {"n": 10}, channel="user-7", dedup_key="digest-7", on_duplicate="update", delay=DELAY_S
    )
    assert later != first and message_row(later)["dequeue_at"] >= before + DELAY_S * 1000
