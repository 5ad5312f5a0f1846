"""OpenTelemetry: the handler's span is a child of the enqueue span, across processes (a
producer process and a real worker, each with the SDK's in-memory exporter), and nothing is
imported or stored when the package is absent or no span records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, worker_env
from tests.worker.conftest import describe

SETTINGS = "tests.worker.settings_otel"

PRODUCE = """
import django
django.setup()
from opentelemetry import trace
from django_lonnymq.api import enqueue, enqueue_many, Item
tracer = trace.get_tracer("test")
with tracer.start_as_current_span("request"):
    print("one", enqueue("t_record", {"n": 1}, channel="acme"))
    print("many", *enqueue_many("t_record", [Item({"n": 2}), Item({"n": 3})]))
print("outside", enqueue("t_discard", {"n": 4}))
"""


def _produce(spans: Path) -> dict[str, list[int]]:
    done = subprocess.run(
        [sys.executable, "-c", PRODUCE],
        cwd=ROOT,
        env=worker_env(DJANGO_SETTINGS_MODULE=SETTINGS, LONNYMQ_TEST_SPANS=str(spans)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return {line.split()[0]: [int(x) for x in line.split()[1:]] for line in done.stdout.splitlines()}


def test_handler_span_is_a_child_of_the_enqueue_span_across_processes(spawn, db, tmp_path: Path) -> None:
    ids = _produce(tmp_path / "producer.json")
    worker = spawn(
        "--queue", "t_record", "--queue", "t_discard", "--burst", settings=SETTINGS,
        LONNYMQ_TEST_SPANS=str(tmp_path / "worker.json"),
    )  # fmt: skip
    assert worker.wait(timeout=60) == 0, describe(worker)
    produced = json.loads((tmp_path / "producer.json").read_text())
    consumed = json.loads((tmp_path / "worker.json").read_text())

    (request,) = [s for s in produced if s["name"] == "request"]
    publishes = [s for s in produced if s["name"] == "t_record publish"]
    assert len(publishes) == 2 and all(p["parent_id"] == request["span_id"] for p in publishes)
    assert all(p["kind"] == "PRODUCER" and p["trace_id"] == request["trace_id"] for p in publishes)
    (single,) = [p for p in publishes if p["attributes"].get("messaging.message.id") == str(ids["one"][0])]
    (batch,) = [p for p in publishes if p is not single]
    assert batch["attributes"]["messaging.batch.message_count"] == 2

    runs = {
        int(s["attributes"]["messaging.message.id"]): s for s in consumed if s["name"] == "t_record process"
    }
    assert set(runs) == set(ids["one"] + ids["many"]), describe(worker)
    assert runs[ids["one"][0]]["parent_id"] == single["span_id"]
    assert all(runs[i]["parent_id"] == batch["span_id"] for i in ids["many"])
    for run in runs.values():
        assert run["trace_id"] == request["trace_id"] and run["kind"] == "CONSUMER"
        assert run["attributes"]["messaging.lonnymq.outcome"] == "ack" and run["status"] == "UNSET"
        assert run["pid"] == worker.pid != request["pid"]

    # Enqueued outside any span: a root publish span of its own, and the run (discarded)
    # is its child, with an error status.
    (alone,) = [s for s in produced if s["name"] == "t_discard publish"]
    assert alone["parent_id"] is None
    (discarded,) = [s for s in consumed if s["name"] == "t_discard process"]
    assert discarded["parent_id"] == alone["span_id"] and discarded["trace_id"] == alone["trace_id"]
    assert (
        discarded["status"] == "ERROR" and discarded["attributes"]["messaging.lonnymq.outcome"] == "discard"
    )


ABSENT = """
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
import django
django.setup()
from django.db import connection
from django_lonnymq.api import enqueue
enqueue("t_record", {"n": 1})
with connection.cursor() as cursor:
    cursor.execute("SELECT count(*) FROM lonnymq_trace")
    print("rows", cursor.fetchone()[0])
print("imported", sorted(m for m in sys.modules if m.startswith("opentelemetry.")))
"""

NOT_RECORDING = ABSENT.replace(
    'sys.modules["opentelemetry"] = None  # as if the otel extra were not installed', ""
)


def _run(script: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_nothing_imported_or_stored_without_the_extra(transactional_db) -> None:
    assert _run(ABSENT) == ["rows 0", "imported []"]


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_nothing_stored_when_no_span_records(transactional_db) -> None:
    # The API is installed but no SDK is configured: spans do not record, no row is written.
    lines = _run(NOT_RECORDING)
    assert lines[0] == "rows 0" and lines[1] != "imported []"


PROVIDER_LATER = """
import time
import django
django.setup()
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from django_lonnymq.tracing import Consumer, enqueuing
with enqueuing("t_record", None) as traced:
    print("unconfigured", Consumer.active(), traced.span is None)
trace.set_tracer_provider(TracerProvider())
time.sleep(1.05)  # the provider is looked up at most once a second until one is set
with enqueuing("t_record", None) as traced:
    print("configured", Consumer.active(), traced.span is not None and traced.span.is_recording())
"""


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_no_span_until_a_provider_is_set(db) -> None:
    # The API alone makes no span and loads no stored context (every message would pay for
    # spans that never record); a provider set after start-up is seen within a second.
    assert _run(PROVIDER_LATER) == ["unconfigured False True", "configured True True"]
