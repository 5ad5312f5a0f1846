"""Workers you can see: three real workers; one killed (SIGKILL), one stopped (SIGTERM). The
admin shows one live, one lost, one stopped, with the right in-flight counts, and the lost
and stopped rows are pruned by the live worker's heartbeat after LONNYMQ_WORKER_PRUNE_AFTER."""

from __future__ import annotations

import signal

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_lonnymq import enqueue_many
from django_lonnymq.models import Worker
from tests.worker.conftest import describe, wait_until

SETTINGS = "tests.worker.settings_workers"
# The same worker timings in this process, where the admin judges lost workers.
TIMINGS = {"LONNYMQ_WORKER_HEARTBEAT": 0.3, "LONNYMQ_WORKER_LOST_AFTER": 5, "LONNYMQ_WORKER_PRUNE_AFTER": 12}


def admin_rows(client: Client, state: str | None = None) -> dict[str, dict[str, object]]:
    """The worker list as the admin shows it: name -> state, reported and held in-flight counts."""
    url = "/admin/django_lonnymq/worker/" + (f"?state={state}" if state else "")
    response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    return {
        w.name: {"state": w.lq_state, "in_flight": w.in_flight, "leases": w.lq_leases, "pid": w.pid}
        for w in response.context["cl"].result_list
    }


@pytest.fixture
def ops(transactional_db, settings) -> Client:
    for name, value in TIMINGS.items():
        setattr(settings, name, value)
    User.objects.create_superuser("ops", "ops@example.com", "pw")
    client = Client()
    client.force_login(User.objects.get(username="ops"))
    return client


def started_by(db, pid: int) -> set[int]:
    return {d["message_id"] for d in db.events("start", "t_sleep") if d["pid"] == pid}


def test_live_lost_and_stopped_workers_in_the_admin_then_pruned(spawn, db, ops):
    db.track_inflight("default")
    # FIFO in one channel: the first two go to the worker killed later, the next two (short)
    # to the one stopped with SIGTERM, the last two to the one that stays.
    enqueue_many("t_sleep", [{"seconds": 60}] * 2 + [{"seconds": 1}] * 2 + [{"seconds": 60}] * 2)
    common = ("--queue", "t_sleep", "--concurrency", "2")
    # The workers left running hold 60 s handlers: they must not hold up the test's teardown.
    quick_exit = ("--shutdown-timeout", "1s")

    doomed = spawn(*common, *quick_exit, "--name", "w-killed", settings=SETTINGS, label="killed")
    wait_until(lambda: len(started_by(db, doomed.pid)) == 2, 30, "the first worker to start two", doomed)
    # Time enough for its 1 s handlers to finish after SIGTERM, however loaded the machine.
    leaving = spawn(
        *common, "--shutdown-timeout", "15s", "--name", "w-stopped", settings=SETTINGS, label="stopped"
    )
    wait_until(lambda: len(started_by(db, leaving.pid)) == 2, 30, "the second worker to start two", leaving)
    leaving.signal(signal.SIGTERM)  # lets its two short handlers finish, then marks its row stopped
    assert leaving.wait(timeout=20) == 0, describe(leaving)
    staying = spawn(*common, *quick_exit, "--name", "w-live", settings=SETTINGS, label="live")
    wait_until(lambda: len(started_by(db, staying.pid)) == 2, 30, "the third worker to start two", staying)
    doomed.signal(signal.SIGKILL)
    doomed.wait(timeout=10)

    def three_states():
        rows = admin_rows(ops)
        wanted = {"w-live": "live", "w-killed": "lost", "w-stopped": "stopped"}
        ok = {n: r["state"] for n, r in rows.items()} == wanted and rows["w-live"]["in_flight"] == 2
        return rows if ok else None

    rows = wait_until(three_states, 40, "one live, one lost, one stopped worker", doomed, leaving, staying)
    # Reported at the last heartbeat, and held now (leases under the worker's name).
    assert rows["w-live"] == {"state": "live", "in_flight": 2, "leases": 2, "pid": staying.pid}
    assert rows["w-killed"] == {"state": "lost", "in_flight": 2, "leases": 2, "pid": doomed.pid}
    assert rows["w-stopped"] == {"state": "stopped", "in_flight": 0, "leases": 0, "pid": leaving.pid}
    assert set(admin_rows(ops, "lost")) == {"w-killed"}
    assert set(admin_rows(ops, "live")) == {"w-live"}
    assert set(admin_rows(ops, "stopped")) == {"w-stopped"}
    stopped = Worker.objects.get(name="w-stopped")
    assert stopped.stopped_at is not None and stopped.processed == 2 and stopped.failed == 0

    # The list page itself, and a held message's leased_by links to its worker.
    page = ops.get("/admin/django_lonnymq/worker/").content.decode()
    assert "w-killed" in page and ">lost<" in page and ">stopped<" in page and ">live<" in page
    held = sorted(started_by(db, staying.pid))[0]
    detail = ops.get(f"/admin/django_lonnymq/message/{held}/change/").content.decode()
    assert 'href="/admin/django_lonnymq/worker/w-live/change/"' in detail
    assert ops.get("/admin/django_lonnymq/worker/w-live/change/").status_code == 200

    # The live worker's heartbeat prunes the others once silent or stopped for 12 s.
    wait_until(
        lambda: set(Worker.objects.values_list("name", flat=True)) == {"w-live"},
        30,
        "the lost and stopped rows to be pruned",
        staying,
    )
    assert staying.alive(), describe(staying)
