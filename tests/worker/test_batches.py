"""Batch handlers in real worker processes (``@handler(queue, batch=N)``): every call holds one
channel's messages, channels are served in round robin, a channel's cap holds across its
calls (measured in a log table), and ``BatchFailed`` retries only the messages it names.
Async batch handlers run on the worker's event loop the same way."""

from __future__ import annotations

from collections import Counter, defaultdict

from django_lonnymq import api, enqueue_many

from .conftest import describe, wait_until

SETTINGS = "tests.worker.settings_asks"


def calls(db, queue):
    """Each handler call in the order it ran: (channel, message ids, attempts)."""
    found: dict[str, list] = defaultdict(list)
    for row in db.rows(
        "SELECT message_id, channel, attempt, event FROM testapp_delivery WHERE queue = %s ORDER BY id", [queue]
    ):
        found[row["event"]].append(row)
    return [
        ([r["channel"] for r in rows], [r["message_id"] for r in rows], int(event.split()[2]))
        for event, rows in found.items()
    ]


def test_three_tenants_300_messages_in_batches_of_50(spawn, db):
    queue = "acc_batch"
    api.configure_channel(queue, "capped", max_concurrency=20)
    db.track_inflight("acme", "globex", "capped")
    ids = {}
    for tenant in ("acme", "globex", "capped"):
        ids[tenant] = enqueue_many(queue, [{"n": n, "fail": tenant == "acme" and n % 25 == 0} for n in range(100)],
                                   channel=tenant)  # fmt: skip
    named = {ids["acme"][n] for n in range(0, 100, 25)}
    worker = spawn("--queue", queue, "--concurrency", "2", settings=SETTINGS)
    wait_until(lambda: not db.messages(queue), 60, "the 300 messages to be acked", worker)
    assert db.dead(queue) == [], describe(worker)

    found = calls(db, queue)
    for channels, message_ids, size in found:
        # One channel per call, never over the batch, the size each row logged is the call's.
        assert len(set(channels)) == 1 and len(message_ids) == size <= 50, (channels, size)
    # Round robin between channels: every tenant has a call before any has a third. The capped
    # tenant's batch (20, begun in the first round) cannot fill: it goes out with the first
    # batch begun after it that fills, not after the others' backlogs (two threads log the
    # calls that start together in either order, hence the first four).
    first_channels = [channels[0] for channels, _, _ in found]
    assert set(first_channels[:4]) == {"acme", "globex", "capped"}, first_channels
    # The cap holds across calls: a capped call never holds more than 20, and never more
    # than 20 of its messages ran in calls at once.
    assert max(size for channels, _, size in found if channels[0] == "capped") <= 20, found
    assert db.scalar("SELECT peak FROM testapp_inflight WHERE channel = 'capped'") <= 20
    assert db.scalar("SELECT peak FROM testapp_inflight WHERE channel = 'acme'") > 20  # others were not held to it
    # Every message ran; only the four named ones ran twice (their retry), the others once.
    runs = Counter(m for _, message_ids, _ in found for m in message_ids)
    assert set(runs) == set(ids["acme"]) | set(ids["globex"]) | set(ids["capped"])
    assert {m for m, n in runs.items() if n == 2} == named and set(runs.values()) == {1, 2}, describe(worker)
    assert db.dead(queue) == []


def test_an_async_batch_handler_fails_the_whole_call_when_it_raises(spawn, db):
    queue = "acc_batch_async"
    a = enqueue_many(queue, [{"n": n, "boom": n == 3} for n in range(30)], channel="a")
    b = enqueue_many(queue, [{"n": n} for n in range(10)], channel="b")
    worker = spawn("--queue", queue, "--concurrency", "2", settings=SETTINGS)
    wait_until(lambda: not db.messages(queue), 30, "the 40 messages to be acked", worker)

    found = calls(db, queue)
    assert all(len(set(channels)) == 1 and len(ids) <= 20 for channels, ids, _ in found), found
    runs = Counter(m for _, message_ids, _ in found for m in message_ids)
    assert set(runs) == set(a) | set(b)
    # The call holding "boom" failed as a whole: each of its messages ran again, no other did.
    boom_call = next(ids for _, ids, _ in found if a[3] in ids)
    assert {m for m, n in runs.items() if n == 2} == set(boom_call), describe(worker)


def test_a_free_thread_leases_a_full_batch_in_one_dequeue(spawn, db):
    """Two free threads ask for two calls: one dequeue leases 100 messages, not 2 at a time (a
    batch filled by many small fetches goes out part-full when they are slower than its wait)."""
    queue = "acc_batch"
    db.track_inflight("solo")
    enqueue_many(queue, [{"n": n} for n in range(100)], channel="solo")
    worker = spawn("--queue", queue, "--concurrency", "2", settings=SETTINGS)
    wait_until(lambda: not db.messages(queue), 30, "the 100 messages to be acked", worker)
    events = {row["event"] for row in db.rows("SELECT DISTINCT event FROM testapp_delivery WHERE queue = %s", [queue])}
    assert sorted(event.split()[2:] for event in events) == [["50", "1"], ["50", "1"]], events


def test_max_messages_counts_a_batch_handlers_messages(spawn, db):
    queue = "acc_batch"
    db.track_inflight("solo")
    enqueue_many(queue, [{"n": n} for n in range(30)], channel="solo")
    worker = spawn("--queue", queue, "--max-messages", "10", settings=SETTINGS)
    assert worker.wait(timeout=30) == 0, describe(worker)
    found = calls(db, queue)
    assert sum(len(ids) for _, ids, _ in found) == 10, found
    assert len(db.messages(queue)) == 20 and all(m["attempts"] == 0 for m in db.messages(queue))
