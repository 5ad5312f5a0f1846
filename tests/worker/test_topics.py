"""Topics with consumer groups, delivered by real worker processes: each group gets each
event once, a rolled-back publish delivers nothing, a failing group leaves the other alone,
and each key's events are handled in publish order in each group."""

from __future__ import annotations

import signal
from collections import Counter, defaultdict

import pytest
from django.db import transaction

from django_lonnymq import Event, api, publish, publish_many
from django_lonnymq.models import Subscription
from tests.worker.conftest import describe, wait_until

SETTINGS = "tests.worker.settings_topics"


def subscribe_rows(topic: str, *queues: str) -> None:
    for queue in queues:
        Subscription.objects.create(topic=topic, queue=queue)


def test_two_groups_get_each_event_once_and_a_rolled_back_publish_delivers_nothing(spawn, db):
    subscribe_rows("orders.created", "tp_a", "tp_b")
    with transaction.atomic():
        ids = publish_many(
            "orders.created", [Event({"n": n}, key=f"customer-{n % 50}") for n in range(1000)]
        )
    assert len(ids) == 1000 and all(len(pair) == 2 for pair in ids)
    with pytest.raises(RuntimeError), transaction.atomic():
        publish_many("orders.created", [Event({"n": n, "rolled_back": True}, key="customer-0") for n in range(100)])
        publish("orders.created", {"n": -1, "rolled_back": True})
        raise RuntimeError("the caller's transaction fails")

    workers = [
        spawn("--queue", "tp_a", "--queue", "tp_b", "--burst", "--concurrency", "4", "--batch-size", "50",
              settings=SETTINGS, label=f"worker {i}")
        for i in range(2)
    ]  # fmt: skip
    for worker in workers:
        assert worker.wait(timeout=120) == 0, describe(*workers)

    for queue in ("tp_a", "tp_b"):
        done = db.events("done", queue)
        assert Counter(d["payload"]["n"] for d in done) == Counter(range(1000)), f"{queue}: not each event once"
        assert all(d["channel"] == f"customer-{d['payload']['n'] % 50}" for d in done)
        assert all(d["attempt"] == 1 for d in done)
        assert db.messages(queue) == []
    assert not any(d["payload"].get("rolled_back") for d in db.deliveries())
    assert api.check() == []
    # The workers wrote the subscription their handler modules declare.
    assert Subscription.objects.filter(topic="orders.declared", queue="tp_b").exists()


def test_a_failing_group_leaves_the_other_untouched(spawn, db, settings):
    settings.LONNYMQ_MAX_ATTEMPTS = 2
    subscribe_rows("payments.settled", "tp_fail", "tp_b")
    with transaction.atomic():
        publish_many("payments.settled", [Event({"n": n}, key=f"k{n % 5}") for n in range(100)])

    worker = spawn("--queue", "tp_fail", "--queue", "tp_b", "--concurrency", "4", settings=SETTINGS)
    wait_until(lambda: len(db.dead("tp_fail")) == 100, 60, "group tp_fail's 100 dead letters", worker)
    wait_until(lambda: len(db.events("done", "tp_b")) == 100, 30, "group tp_b's 100 deliveries", worker)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0, describe(worker)

    dead = db.dead("tp_fail")
    assert sorted(d["payload"]["n"] for d in dead) == list(range(100))
    assert all(d["attempts"] == 2 and d["reason"] == "failed" for d in dead)
    assert len(db.events("fail", "tp_fail")) == 200
    done_b = db.events("done", "tp_b")
    assert Counter(d["payload"]["n"] for d in done_b) == Counter(range(100))
    assert all(d["attempt"] == 1 for d in done_b), "group tp_b saw retries that were tp_fail's"
    assert db.dead("tp_b") == [] and db.messages("tp_b") == []


def test_each_key_is_handled_in_publish_order_in_each_group(spawn, db):
    keys = [f"account-{i}" for i in range(10)]
    subscribe_rows("ledger.entry", "tp_a", "tp_b")
    for queue in ("tp_a", "tp_b"):
        for key in keys:
            api.configure_channel(queue, key, max_concurrency=1)
    events = [Event({"key": keys[n % 10], "seq": n // 10}, key=keys[n % 10]) for n in range(300)]
    with transaction.atomic():
        publish_many("ledger.entry", events)

    workers = [
        spawn("--queue", "tp_a", "--queue", "tp_b", "--burst", "--concurrency", "2",
              settings=SETTINGS, label=f"worker {i}")
        for i in range(4)
    ]  # fmt: skip
    for worker in workers:
        assert worker.wait(timeout=120) == 0, describe(*workers)

    pids = {d["pid"] for d in db.events("done")}
    assert len(pids) >= 2, f"the events were handled by {len(pids)} worker(s) only\n{describe(*workers)}"
    for queue in ("tp_a", "tp_b"):
        seen: dict[str, list[int]] = defaultdict(list)
        for delivery in db.events("done", queue):  # in the order they were handled (delivery id)
            seen[delivery["channel"]].append(delivery["payload"]["seq"])
        assert set(seen) == set(keys)
        for key in keys:
            assert seen[key] == list(range(30)), f"{queue}/{key} handled out of order: {seen[key]}"
