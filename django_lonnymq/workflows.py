"""Workflows: a DAG of steps, each a message of its queue and channel, started in one SQL call
in the caller's transaction (``lonnymq_workflow_start_v1``).

A step without parents goes into the message table at the start; a step with parents waits
in ``lonnymq_workflow_step`` (not in the message table, so dequeues never see it) until the
ack of its last parent releases it, in that ack's SQL call (``lonnymq_workflow_ack_v2``). A
handler's JSON return value is its step's output; a step reads its parents' outputs in
``message.parent_outputs``. See docs/workflows.md.

```python
with transaction.atomic():
    flow = Workflow("import", channel=f"tenant-{tenant.id}")
    fetch = flow.step("fetch", {"url": url})
    parts = [flow.step("parse", {"part": i}, after=[fetch]) for i in range(10)]
    flow.step("merge", {}, after=parts)
    workflow_id = flow.start()
```
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from . import arguments, bounds, db
from .conf import settings
from .durations import duration_ms
from .exceptions import InvalidArgument

# A step's message carries this dedup key prefix and its workflow id: how a worker tells a
# step from a plain message without asking the database.
STEP_KEY_PREFIX = "lonnymq.step:"
# The on_failure message's dedup key: this prefix and the workflow id (enqueued once).
FAILED_KEY_PREFIX = "lonnymq.workflow_failed:"


def workflow_of(dedup_key: str | None) -> int | None:
    """The workflow id a step's (or an on_failure message's) dedup key carries, else None."""
    if not dedup_key:
        return None
    for prefix in (STEP_KEY_PREFIX, FAILED_KEY_PREFIX):
        if dedup_key.startswith(prefix):
            try:
                return int(dedup_key[len(prefix) :])
            except ValueError:
                return None
    return None


def is_step(dedup_key: str | None) -> bool:
    return bool(dedup_key) and dedup_key.startswith(STEP_KEY_PREFIX)  # type: ignore[union-attr]


class Step:
    """A step of a :class:`Workflow` (what :meth:`Workflow.step` returns): pass it in another
    step's ``after``. ``name`` is its key in its children's ``message.parent_outputs``."""

    __slots__ = ("workflow", "index", "name", "queue", "channel", "payload", "delay_ms", "max_attempts", "after")

    def __init__(
        self,
        workflow: Workflow,
        index: int,
        name: str,
        queue: str,
        channel: str,
        payload: str,
        delay_ms: int,
        max_attempts: int,
        after: list[Step | str],
    ):
        self.workflow = workflow
        self.index = index
        self.name = name
        self.queue = queue
        self.channel = channel
        self.payload = payload  # JSON text, checked
        self.delay_ms = delay_ms
        self.max_attempts = max_attempts
        self.after = after

    def __repr__(self) -> str:
        return f"<Step {self.name!r} of {self.workflow.name!r}>"


class Workflow:
    """A DAG of steps to start in one SQL call, in the caller's transaction.

    ``channel`` is the steps' default channel (the tenant: steps are served fairly across
    channels like any message); ``using`` the database alias. Steps are declared with
    :meth:`step`; a step's ``after`` names its parents (steps of this workflow, or their
    names). :meth:`start` checks the graph (no cycle, no step after itself, no parent from
    another workflow, at most ``bounds.MAX_WORKFLOW_STEPS`` steps), writes it and returns the
    workflow id; it may be called once.
    """

    def __init__(self, name: str, *, channel: str | None = None, using: str | None = None):
        self.name = arguments.name("name", name, bounds.MAX_WORKFLOW_NAME)
        self.channel = arguments.channel(channel) if channel is not None else None
        self.using = db.alias(using)
        self.steps: list[Step] = []
        self._by_name: dict[str, Step] = {}
        self._named: dict[str, int] = {}  # default names given per queue
        self._on_failure: tuple[str, str, str, int] | None = None
        self.id: int | None = None

    def _not_started(self) -> None:
        if self.id is not None:
            raise InvalidArgument("workflow", "was started already (start a new Workflow)", self.id)

    def step(
        self,
        queue: str,
        payload: Any,
        *,
        after: Iterable[Step | str] | Step | str = (),
        name: str | None = None,
        channel: str | None = None,
        delay: timedelta | float | None = None,
        max_attempts: int | None = None,
    ) -> Step:
        """Add a step: a message of ``queue`` with ``payload``, released once every step in
        ``after`` has succeeded. ``name`` (default: the queue, then ``queue.2``, ``queue.3``...)
        is unique in the workflow. ``channel`` defaults to the workflow's (else "default")."""
        self._not_started()
        if len(self.steps) >= bounds.MAX_WORKFLOW_STEPS:
            raise InvalidArgument("steps", f"must be at most {bounds.MAX_WORKFLOW_STEPS} per workflow", len(self.steps) + 1)
        arguments.queue(queue)
        channel = arguments.channel(channel if channel is not None else (self.channel or "default"))
        text = arguments.payload(payload)
        delay_ms = 0 if delay is None else duration_ms("delay", delay, bounds.MAX_AHEAD)
        attempts = arguments.integer(
            "max_attempts", settings.MAX_ATTEMPTS if max_attempts is None else max_attempts, 1, bounds.MAX_ATTEMPTS
        )
        if name is None:
            n = self._named.get(queue, 0)
            name = queue if n == 0 else f"{queue}.{n + 1}"
            while name in self._by_name:
                n += 1
                name = f"{queue}.{n + 1}"
            self._named[queue] = n + 1
        else:
            arguments.name("name", name, bounds.MAX_WORKFLOW_NAME)
            if name in self._by_name:
                raise InvalidArgument("name", "must be unique in the workflow", name)
        parents: list[Step | str] = []
        for parent in [after] if isinstance(after, (Step, str)) else list(after):
            if isinstance(parent, Step):
                if parent.workflow is not self:
                    raise InvalidArgument(
                        "after", "must name steps of the same workflow", f"{parent.name!r} of {parent.workflow.name!r}"
                    )
            elif isinstance(parent, str):
                if parent == name:
                    raise InvalidArgument("after", "must not name the step itself", parent)
            else:
                raise InvalidArgument("after", "must be steps of this workflow or their names", parent)
            parents.append(parent)
        created = Step(self, len(self.steps), name, queue, channel, text, delay_ms, attempts, parents)
        self.steps.append(created)
        self._by_name[name] = created
        return created

    def on_failure(
        self, queue: str, payload: Any, *, channel: str | None = None, max_attempts: int | None = None
    ) -> None:
        """A message enqueued once, when the workflow first fails (a step ends dead). Its
        ``message.workflow_id`` is the workflow's."""
        self._not_started()
        arguments.queue(queue)
        channel = arguments.channel(channel if channel is not None else (self.channel or "default"))
        attempts = arguments.integer(
            "max_attempts", settings.MAX_ATTEMPTS if max_attempts is None else max_attempts, 1, bounds.MAX_ATTEMPTS
        )
        self._on_failure = (queue, channel, arguments.payload(payload), attempts)

    def _order(self) -> tuple[list[Step], list[tuple[int, int]]]:
        """The steps in a topological order (declaration order where free) and the edges as
        (parent position, child position), 1-based; a cycle raises."""
        parents: dict[int, set[int]] = {}
        for step in self.steps:
            ids: set[int] = set()
            for parent in step.after:
                if isinstance(parent, str):
                    found = self._by_name.get(parent)
                    if found is None:
                        raise InvalidArgument("after", "must name a step of this workflow", parent)
                    parent = found
                if parent is step:
                    raise InvalidArgument("after", "must not name the step itself", step.name)
                ids.add(parent.index)
            parents[step.index] = ids
        children: dict[int, list[int]] = {s.index: [] for s in self.steps}
        for child, ps in parents.items():
            for p in ps:
                children[p].append(child)
        waiting = {i: len(ps) for i, ps in parents.items()}
        ready = [i for i, n in waiting.items() if n == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for c in children[i]:
                waiting[c] -= 1
                if waiting[c] == 0:
                    heapq.heappush(ready, c)
        if len(order) < len(self.steps):
            stuck = sorted(self.steps[i].name for i, n in waiting.items() if n > 0)
            shown = ", ".join(stuck[:10]) + (f" and {len(stuck) - 10} more" if len(stuck) > 10 else "")
            raise InvalidArgument("after", "must not form a cycle", shown)
        position = {index: pos + 1 for pos, index in enumerate(order)}
        edges = sorted((position[p], position[c]) for c, ps in parents.items() for p in ps)
        return [self.steps[i] for i in order], edges

    def start(self) -> int:
        """Write the workflow in the caller's transaction (one SQL call); its id."""
        self._not_started()
        if not self.steps:
            raise InvalidArgument("steps", "must be at least 1 per workflow", 0)
        ordered, edges = self._order()
        failure = self._on_failure
        params = {
            "name": self.name,
            "channel": self.channel,
            "names": [s.name for s in ordered],
            "queues": [s.queue for s in ordered],
            "channels": [s.channel for s in ordered],
            "payloads": [s.payload for s in ordered],
            "delays_ms": [s.delay_ms for s in ordered],
            "max_attempts": [s.max_attempts for s in ordered],
            "edge_parents": [p for p, _ in edges],
            "edge_children": [c for _, c in edges],
            "on_failure_queue": failure[0] if failure else None,
            "on_failure_channel": failure[1] if failure else None,
            "on_failure_payload": failure[2] if failure else None,
            "on_failure_max_attempts": failure[3] if failure else None,
            "tolerance_ms": settings.ms("WAKE_TOLERANCE"),
        }
        self.id = int(db.value("workflow_start", params, using=self.using, arrays=True))
        return self.id


def chain(flow: Workflow, *steps: tuple[str, Any] | dict[str, Any]) -> list[Step]:
    """Add steps to ``flow`` that run one after another: each ``(queue, payload)`` or a dict
    of :meth:`Workflow.step` arguments (``{"queue": ..., "payload": ..., "name": ...}``)."""
    made: list[Step] = []
    for spec in steps:
        kwargs = dict(spec) if isinstance(spec, dict) else {"queue": spec[0], "payload": spec[1]}
        if made:
            kwargs["after"] = [made[-1], *list(kwargs.get("after", ()))]
        made.append(flow.step(**kwargs))
    return made


def chord(flow: Workflow, header: Sequence[Step], callback: tuple[str, Any] | dict[str, Any]) -> Step:
    """Add ``callback`` to ``flow``, after every step of ``header`` (Celery's chord): it reads
    their outputs in ``message.parent_outputs``."""
    kwargs = dict(callback) if isinstance(callback, dict) else {"queue": callback[0], "payload": callback[1]}
    kwargs["after"] = [*header, *list(kwargs.get("after", ()))]
    return flow.step(**kwargs)


# ---------------------------------------------------------------------------------------
# Reading and operating
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepState:
    """A step of :func:`workflow`: state is waiting, queued, running, succeeded, dead or
    cancelled; ``parents`` the ids of its parents."""

    id: int
    name: str
    queue: str
    channel: str
    state: str
    output: Any
    created_at: datetime
    released_at: datetime | None
    finished_at: datetime | None
    attempts: int | None
    parents: tuple[int, ...]


@dataclass(frozen=True)
class WorkflowState:
    """A workflow's state (running, succeeded, failed or cancelled) and its steps."""

    id: int
    name: str
    channel: str | None
    state: str
    steps_total: int
    remaining: int
    dead: int
    created_at: datetime
    finished_at: datetime | None
    on_failure_message_id: int | None
    steps: tuple[StepState, ...]

    def step(self, name: str) -> StepState:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def workflow(workflow_id: int, *, using: str | None = None) -> WorkflowState:
    """A workflow's state and each step's state and times."""
    params = {"id": arguments.message_id("workflow_id", workflow_id)}
    found = db.rows("workflow_state", params, using=using)
    if not found:
        raise InvalidArgument("workflow_id", "must name an existing workflow", workflow_id)
    w = found[0]
    steps = tuple(
        StepState(r[0], r[1], r[2], r[3], r[4], _json(r[5]), r[6], r[7], r[8], r[9], tuple(r[10]))
        for r in db.rows("workflow_steps", params, using=using)
    )
    return WorkflowState(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], steps)


def cancel_workflow(workflow_id: int, *, using: str | None = None) -> int:
    """Cancel a workflow: waiting and queued steps at once, running ones as
    :func:`~django_lonnymq.api.cancel` does (their handlers are told and interrupted). A
    succeeded or cancelled workflow is left alone. Returns how many running steps were told."""
    params = {"id": arguments.message_id("workflow_id", workflow_id)}
    return int(db.value("workflow_cancel", params, using=using))


def requeue_failed_steps(workflow_id: int, *, using: str | None = None) -> list[int]:
    """Requeue the dead steps of a workflow (attempts reset): the workflow runs again."""
    params = {"id": arguments.message_id("workflow_id", workflow_id)}
    ids = [int(r[0]) for r in db.rows("workflow_failed_steps", params, using=using)]
    if not ids:
        return []
    return list(
        db.value(
            "requeue_dead",
            {"ids": ids, "reset_attempts": True, "tolerance_ms": settings.ms("WAKE_TOLERANCE")},
            using=using,
        )
    )


def counts(*, using: str | None = None) -> dict[str, int]:
    """How many workflows are in each state: running, succeeded, failed, cancelled."""
    return {str(state): int(n) for state, n in db.rows("workflow_counts", using=using)}


def prune(older_than: timedelta | float, *, limit: int = 1000, using: str | None = None) -> int:
    """Delete finished workflows (and their steps and outputs) finished more than
    ``older_than`` ago, up to ``limit``; one with a step message still queued, running or
    dead is kept. Returns how many were deleted."""
    params = {
        "older_than_ms": duration_ms("older_than", older_than, bounds.MAX_INTERVAL),
        "limit": arguments.integer("limit", limit, 1, 100_000),
    }
    return int(db.value("workflow_prune", params, using=using))
