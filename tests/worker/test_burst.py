"""--burst drains the queue over several channels and exits 0; --max-messages stops after N."""

from __future__ import annotations

from collections import Counter

from django_lonnymq import Item, enqueue_many
from tests.worker.conftest import describe


def test_burst_drains_every_channel_exactly_once_and_exits_0(spawn, db):
    items = [Item({"n": n}, channel=f"tenant-{n % 5}") for n in range(100)]
    ids = enqueue_many("t_record", items)

    worker = spawn("--queue", "t_record", "--burst", "--concurrency", "4", "--batch-size", "4")
    code = worker.wait(timeout=30)

    assert code == 0, describe(worker)
    done = db.events("done", "t_record")
    counts = Counter(d["message_id"] for d in done)
    assert sorted(counts) == sorted(ids), f"missing: {sorted(set(ids) - set(counts))}\n{describe(worker)}"
    assert set(counts.values()) == {1}, f"delivered more than once: {[i for i, n in counts.items() if n > 1]}"
    assert {d["channel"] for d in done} == {f"tenant-{k}" for k in range(5)}
    assert all(d["attempt"] == 1 for d in done)
    assert db.messages("t_record") == []
    assert db.dead("t_record") == []
    stats = worker.stats()
    assert stats["acked"] == 100 and stats["fetched"] == 100, describe(worker)


def test_burst_worker_serves_small_channels_early_round_robin(spawn, db):
    """One tenant's backlog does not delay the others: with one handler and batch 1, the
    worker's own order of deliveries is round robin across the channels."""
    big = enqueue_many("t_record", [Item({"big": n}, channel="big") for n in range(40)])
    small = enqueue_many("t_record", [Item({"small": n}, channel=f"small-{n % 4}") for n in range(12)])
    assert max(big) < min(small)  # the backlog was there first

    worker = spawn("--queue", "t_record", "--burst", "--concurrency", "1", "--batch-size", "1")
    assert worker.wait(timeout=30) == 0, describe(worker)

    order = [d["message_id"] for d in db.events("done", "t_record")]
    assert sorted(order) == sorted(big + small)
    last_small = max(order.index(i) for i in small)
    # Exact round robin over 5 channels serves the 12 small messages within 15 releases.
    assert last_small < 16, f"last small-tenant message was delivery #{last_small + 1}: {order}"


def test_max_messages_stops_after_n_and_leaves_the_rest_ready(spawn, db):
    ids = enqueue_many("t_record", [Item({"n": n}, channel=f"c{n % 2}") for n in range(10)])

    worker = spawn("--queue", "t_record", "--max-messages", "4", "--concurrency", "3")
    code = worker.wait(timeout=30)  # not --burst: --max-messages alone makes it exit

    assert code == 0, describe(worker)
    done = db.events("done", "t_record")
    assert len(done) == 4, f"{done}\n{describe(worker)}"
    assert len({d["message_id"] for d in done}) == 4
    left = db.messages("t_record")
    assert sorted(m["id"] for m in left) == sorted(set(ids) - {d["message_id"] for d in done})
    assert all(m["lease_until"] is None and m["attempts"] == 0 for m in left), left
    assert worker.stats()["fetched"] == 4, describe(worker)
