"""Spans of handler runs, attached to every worker as an observer: registered with
:func:`django_lonnymq.worker.duties.register_observer` from the app's ``ready()``, so the worker
package imports no span code."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from .. import statements
from ..message import Message
from ..worker.connection import ControlConnection
from ..worker.held import Held
from ..worker.observer import Observer
from ..worker.outcomes import Outcome
from . import Consumer

logger = logging.getLogger("django_lonnymq.worker")

# Trace contexts of messages that are gone are dropped after this many seconds.
TRACE_PRUNE_EVERY = 60.0


class TracingObserver(Observer):
    """Loads the trace contexts their producers stored for the messages fetched, spans each
    run, and drops the contexts of messages no longer held (memory and table) once a minute."""

    def __init__(self, connection: ControlConnection, held: Held):
        self.connection = connection
        self.held = held
        self.consumer = Consumer()
        self._next_prune = 0.0

    def fetched(self, messages: Sequence[Message]) -> None:
        if messages and self.consumer.active():
            ids = [message.id for message in messages]
            self.consumer.loaded(
                self.connection.quietly(
                    "load trace contexts", lambda: statements.trace_load(ids=ids, on=self.connection)
                )
            )

    def handler_started(self, message: Message) -> None:
        try:
            self.consumer.started(message)
        except Exception:  # a tracing SDK's error must not cost the message its run
            logger.exception("could not start the span of message %s", message.id)

    def handler_finished(self, message: Message, seconds: float, outcome: Outcome) -> None:
        try:
            self.consumer.finished(message, outcome.action, outcome.error)
        except Exception:
            logger.exception("could not end the span of message %s", message.id)

    def tick(self) -> None:
        now = time.monotonic()
        if now >= self._next_prune:
            self._next_prune = now + TRACE_PRUNE_EVERY
            self.consumer.forget(self.held.ids())
            self.connection.quietly(
                "drop old trace contexts",
                lambda: statements.trace_prune(older_than_s=TRACE_PRUNE_EVERY, on=self.connection),
            )
