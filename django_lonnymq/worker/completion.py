"""Giving leases back: handlers' outcomes recorded in batches, and releases on shutdown.

Handler threads :meth:`~Completion.post` outcomes; the control thread :meth:`~Completion.flush`es
them: every ack in one call (its arrays sent as literals), each failure, retry or discard in
one call of its own. An outcome sent when the connection dropped is sent again after
reconnecting: the first call may have committed, which the second tells apart.
"""

from __future__ import annotations

import logging
import queue as queue_mod

from .. import statements
from ..conf import settings
from ..message import Message
from .connection import STATEMENT_ERRORS, ControlConnection, describe_failure
from .held import Held
from .lifecycle import Recorder, refuses_data
from .observer import Observers
from .outcomes import Outcome
from .progress import Reports
from .stats import Stats
from .waiting import Waiter

logger = logging.getLogger("django_lonnymq.worker")


class Completion:
    """The outcomes waiting to be recorded, and the calls that record them."""

    def __init__(
        self,
        connection: ControlConnection,
        held: Held,
        observers: Observers,
        stats: Stats,
        waiter: Waiter,
        reports: Reports | None = None,
    ):
        self.connection = connection
        self.held = held
        self.observers = observers
        self.stats = stats
        self.waiter = waiter
        self.reports = reports
        self.recorder = Recorder(connection, observers, stats)
        # SimpleQueue: put and get in C, a few microseconds less per message than queue.Queue.
        self._outcomes: queue_mod.SimpleQueue[Outcome] = queue_mod.SimpleQueue()

    def post(self, outcome: Outcome) -> None:
        """A handler's outcome, for the control thread to record (woken if it sleeps)."""
        self._outcomes.put(outcome)
        if self.waiter.sleeping:
            self.waiter.nudge()

    def pending(self) -> bool:
        return not self._outcomes.empty()

    def flush(self) -> None:
        """Ack everything finished in one call; fail/retry/discard one by one."""
        done: list[Outcome] = []
        while True:
            try:
                done.append(self._outcomes.get_nowait())
            except queue_mod.Empty:
                break
        if not done:
            return
        recorded: list[Outcome] = []
        try:
            if self.reports is not None:
                self.reports.finished(o.message for o in done)  # their last report, first
            step_acks = [o for o in done if o.action == "ack" and o.message.step_name is not None]
            if step_acks:
                self._ack_steps(step_acks)
                recorded.extend(step_acks)
            acks = [o for o in done if o.action == "ack" and o.message.step_name is None]
            if acks:
                self.recorder.ack(acks)
                recorded.extend(acks)
            for outcome in done:
                if outcome.action != "ack":
                    self.recorder.fail(outcome)
                    recorded.append(outcome)
        except STATEMENT_ERRORS:
            for outcome in done:  # keep what was not recorded: flushed again after reconnecting
                if not any(outcome is r for r in recorded):
                    outcome.resent = True
                    self._outcomes.put(outcome)
            raise
        finally:
            self.held.drop(outcome.message.id for outcome in recorded)

    def _ack_steps(self, acks: list[Outcome]) -> None:
        """Ack workflow steps with their outputs; the same call releases their ready children.

        A batch the database refuses (on a healthy connection) is acked again one step at a
        time, and a step whose own ack is refused fails alone with that error: one output
        the database will not store never holds up the others, nor the worker."""
        try:
            self.recorder.ack_steps(acks)
        except STATEMENT_ERRORS as exc:
            if self.connection.is_lost(exc) or not refuses_data(exc):
                raise  # sent again: after reconnecting, or once the passing trouble is over
            if len(acks) > 1:
                for outcome in acks:
                    self._ack_steps([outcome])
                return
            [outcome] = acks
            kind, detail = describe_failure(exc)
            logger.error(
                "the ack of step %s was refused (%s: %s); failing it", outcome.message.id, kind, detail
            )
            self.recorder.fail(
                Outcome(outcome.message, "fail", error=f"the step's output could not be stored: {detail}")
            )

    def release(self, messages: list[Message]) -> None:
        """Give back leases whose handler never started (shutdown): due again at once."""
        if not messages:
            return
        released = statements.release(
            ids=[m.id for m in messages],
            tokens=[str(m.lease_token) for m in messages],
            tolerance_ms=settings.ms("WAKE_TOLERANCE"),
            on=self.connection,
        )
        self.stats.released += len(released or [])
