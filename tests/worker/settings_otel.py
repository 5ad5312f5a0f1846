"""tests.worker_settings with the OpenTelemetry SDK recording into its in-memory exporter; the
finished spans are written as JSON to $LONNYMQ_TEST_SPANS when the process exits
(tests/worker/test_tracing.py reads them, from the producer and the worker processes)."""

import atexit
import json
import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.worker_settings import *  # noqa: F403

EXPORTER = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(_provider)


def _dump() -> None:
    spans = [
        {
            "name": span.name,
            "kind": span.kind.name,
            "trace_id": f"{span.context.trace_id:032x}",
            "span_id": f"{span.context.span_id:016x}",
            "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
            "status": span.status.status_code.name,
            "attributes": {k: v for k, v in (span.attributes or {}).items()},
            "pid": os.getpid(),
        }
        for span in EXPORTER.get_finished_spans()
    ]
    with open(os.environ["LONNYMQ_TEST_SPANS"], "w") as out:
        json.dump(spans, out)


if os.environ.get("LONNYMQ_TEST_SPANS"):
    atexit.register(_dump)
