"""``run_queue_worker --metrics-port``: a real worker's Prometheus endpoint, scraped over HTTP."""

from __future__ import annotations

import re
import time
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from django_lonnymq.api import Item, enqueue_many
from tests.worker.conftest import describe, wait_until

SETTINGS = "tests.worker.settings_fastretry"
URL = re.compile(r"metrics on (http://\S+/metrics)")


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint, by (name, sorted labels)."""
    response = requests.get(url, timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    found = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def counter(samples: dict, outcome: str, queue: str = "acc_metrics") -> float:
    return samples[("lonnymq_worker_messages_total", (("outcome", outcome), ("queue", queue)))]


def test_counters_and_histogram_after_100_messages(spawn, db) -> None:
    kinds = ["ok"] * 60 + ["retry"] * 30 + ["discard"] * 10
    enqueue_many(
        "acc_metrics", [Item({"kind": kind, "n": n}, channel=f"c{n % 7}") for n, kind in enumerate(kinds)]
    )

    worker = spawn(
        "--queue", "acc_metrics", "--concurrency", "4", "--metrics-port", "0", "--metrics-address", "127.0.0.1",
        settings=SETTINGS,
    )  # fmt: skip
    url = URL.search(worker.wait_for_line("metrics on http://", timeout=60))[1]
    assert re.match(r"^http://127\.0\.0\.1:\d+/metrics$", url)

    def finished() -> bool:
        return not db.messages("acc_metrics") and len(db.dead("acc_metrics")) == 10

    wait_until(finished, 60, "100 messages to be done", worker)
    # The database commits an ack just before the worker counts it: give the counters a moment.
    deadline = time.monotonic() + 10
    while True:
        samples = scrape(url)
        if counter(samples, "acked") >= 90 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert worker.alive(), describe(worker)

    outcomes = {
        o: counter(samples, o) for o in ("acked", "retried", "dead", "timed_out", "cancelled", "lease_lost")
    }
    assert outcomes == {
        "acked": 90,
        "retried": 30,
        "dead": 10,
        "timed_out": 0,
        "cancelled": 0,
        "lease_lost": 0,
    }
    runs = samples[("lonnymq_worker_handler_duration_seconds_count", (("queue", "acc_metrics"),))]
    assert runs == 130  # 60 + 30 x 2 + 10
    assert (
        samples[
            ("lonnymq_worker_handler_duration_seconds_bucket", (("le", "+Inf"), ("queue", "acc_metrics")))
        ]
        == 130
    )
    assert samples[("lonnymq_worker_handler_duration_seconds_sum", (("queue", "acc_metrics"),))] > 0
    assert samples[("lonnymq_worker_running_messages", (("queue", "acc_metrics"),))] == 0
    assert samples[("lonnymq_worker_leased_messages", (("queue", "acc_metrics"),))] == 0
    assert samples[("lonnymq_worker_concurrency", ())] == 4
    info: list[Any] = [labels for (name, labels) in samples if name == "lonnymq_worker_info"]
    assert len(info) == 1 and ("pid", str(worker.pid)) in info[0]
    assert worker.stop() == 0, describe(worker)


def test_two_workers_on_one_host_each_have_a_port(spawn, db) -> None:
    enqueue_many("acc_metrics", [Item({"kind": "ok", "n": n}, channel=f"c{n % 3}") for n in range(40)])
    workers = [
        spawn(
            "--queue",
            "acc_metrics",
            "--metrics-port",
            "0",
            "--metrics-address",
            "127.0.0.1",
            settings=SETTINGS,
        )
        for _ in range(2)
    ]
    urls = [URL.search(w.wait_for_line("metrics on http://", timeout=60))[1] for w in workers]
    assert urls[0] != urls[1]
    wait_until(lambda: not db.messages("acc_metrics"), 60, "40 messages to be done", *workers)
    deadline = time.monotonic() + 10
    while True:
        acked = [counter(scrape(url), "acked") for url in urls]
        if sum(acked) >= 40 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    # Each process counts its own work; together exactly the 40 messages.
    assert sum(acked) == 40, (acked, describe(*workers))
    for worker in workers:
        assert worker.stop() == 0, describe(worker)


def test_a_port_in_use_is_a_clear_error(spawn, db) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        worker = spawn(
            "--queue",
            "acc_metrics",
            "--metrics-port",
            str(port),
            "--metrics-address",
            "127.0.0.1",
            settings=SETTINGS,
        )
        assert worker.wait(timeout=60) == 1
    assert f"--metrics-port {port} on 127.0.0.1:" in worker.output, describe(worker)
