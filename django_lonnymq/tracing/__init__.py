"""OpenTelemetry spans (optional: the ``otel`` extra, ``opentelemetry-api``).

- Enqueue: a ``<queue> publish`` span (kind PRODUCER) around ``enqueue``/``enqueue_many``.
  When it records, its context (W3C ``traceparent``/``tracestate``, through the configured
  propagator) is stored beside the messages in ``lonnymq_trace``, by the same statement that
  enqueues them (``enqueue_traced`` in queries.sql), in the caller's transaction.
- Handling: a ``<queue> process`` span (kind CONSUMER) around each handler run, a child of
  the enqueue span, in the worker process; current while the handler runs, so the handler's
  own spans nest under it. A run that does not end in an ack sets the span's status to error.

Nothing is imported, and nothing is written, unless opentelemetry can be imported and
``LONNYMQ_TRACING`` is true (the default); with the API but no SDK (no tracer provider set)
no span is made, no trace context is stored or loaded.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..conf import settings

if TYPE_CHECKING:
    from ..message import Message

logger = logging.getLogger("django_lonnymq.tracing")

SYSTEM = "lonnymq"
_unavailable = False
_modules: _Otel | None = None


def _otel() -> _Otel | None:
    """The opentelemetry modules, or None when tracing is off, the package is absent, or no
    SDK is configured (the API's own provider makes spans that never record: skipping them
    keeps an installed but unconfigured API from costing every message a span and every
    batch a query)."""
    global _unavailable, _modules
    if _unavailable or not settings.TRACING:
        return None
    if _modules is None:
        try:
            from opentelemetry import context, propagate, trace
        except ImportError:
            _unavailable = True
            return None
        _modules = _Otel(context, propagate, trace)
    return _modules if _modules.configured() else None


class _Otel:
    def __init__(self, context: Any, propagate: Any, trace: Any):
        self.context, self.propagate, self.trace = context, propagate, trace
        self._unconfigured = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        self._configured = False
        self._asked_at = -math.inf

    def configured(self) -> bool:
        """Is a real tracer provider set? Once it is, it stays; until then, asked again at
        most once a second (a provider may be set after the worker started; asking reads
        the environment, which cost more than the rest of an untraced run)."""
        if not self._configured:
            now = time.monotonic()
            if now - self._asked_at >= 1.0:
                self._asked_at = now
                self._configured = not isinstance(self.trace.get_tracer_provider(), self._unconfigured)
        return self._configured

    def tracer(self) -> Any:
        return self.trace.get_tracer("django_lonnymq")


class Traced:
    """What an enqueue inside a span needs: ``context`` (JSON of the span's propagated context
    when it records, else None) to store with the messages, and a call with the new ids."""

    def __init__(self, span: Any = None, context: str | None = None):
        self.span = span
        self.context = context

    def __call__(self, ids: Sequence[int]) -> None:
        if self.span is None:
            return
        if len(ids) == 1:
            self.span.set_attribute("messaging.message.id", str(ids[0]))
        self.span.set_attribute("messaging.batch.message_count", len(ids))


_UNTRACED = Traced()


@contextlib.contextmanager
def enqueuing(queue: str, channel: str | None) -> Iterator[Traced]:
    """Around an enqueue: a publish span, current while the messages are written."""
    otel = _otel()
    if otel is None:
        yield _UNTRACED
        return
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation.type": "send",
    }
    if channel is not None:
        attributes["messaging.lonnymq.channel"] = channel
    with otel.tracer().start_as_current_span(
        f"{queue} publish", kind=otel.trace.SpanKind.PRODUCER, attributes=attributes
    ) as span:
        context = None
        if span.is_recording():
            carrier: dict[str, str] = {}
            otel.propagate.inject(carrier)
            context = json.dumps(carrier) if carrier else None
        yield Traced(span, context)


class Consumer:
    """One worker's side: loads the stored contexts of leased messages, spans their runs."""

    def __init__(self) -> None:
        self.contexts: dict[int, dict[str, str]] = {}
        self.runs: dict[int, tuple[Any, Any]] = {}

    @staticmethod
    def active() -> bool:
        return _otel() is not None

    def loaded(self, rows: Sequence[tuple[Any, Any]]) -> None:
        for message_id, context in rows:
            if isinstance(context, str):
                context = json.loads(context)
            if isinstance(context, dict):
                self.contexts[int(message_id)] = {str(k): str(v) for k, v in context.items()}

    def started(self, message: Message) -> None:
        otel = _otel()
        if otel is None:
            return
        parent = otel.propagate.extract(self.contexts.get(message.id, {}))
        span = otel.tracer().start_span(
            f"{message.queue} process",
            context=parent,
            kind=otel.trace.SpanKind.CONSUMER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.destination.name": message.queue,
                "messaging.operation.type": "process",
                "messaging.message.id": str(message.id),
                "messaging.lonnymq.channel": message.channel,
                "messaging.lonnymq.attempt": message.attempt,
            },
        )
        token = otel.context.attach(otel.trace.set_span_in_context(span))
        self.runs[message.id] = (span, token)

    def finished(self, message: Message, action: str | None, error: str | None) -> None:
        run = self.runs.pop(message.id, None)
        if run is None:
            return
        otel = _otel()
        span, token = run
        try:
            if otel is not None:
                span.set_attribute("messaging.lonnymq.outcome", action or "unknown")
                if action not in ("ack", None):
                    lines = (error or action or "").strip().splitlines()
                    span.set_status(
                        otel.trace.Status(otel.trace.StatusCode.ERROR, lines[-1] if lines else action)
                    )
                otel.context.detach(token)
        finally:
            span.end()

    def forget(self, keep: set[int]) -> None:
        """Drop the contexts of messages no longer held."""
        for message_id in [i for i in self.contexts if i not in keep]:
            del self.contexts[message_id]
