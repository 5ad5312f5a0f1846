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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from . import arguments, bounds, db, eager, routing, statements
from .conf import settings
from .durations import duration_ms
from .exceptions import InvalidArgument

# Workflow.step's payload when none is given (a Django Task step has args and kwargs).
_NO_PAYLOAD: Any = object()


def parent_outputs() -> dict[str, Any]:
    """Inside a Django Task that runs as a workflow step (``flow.step(task, ...)``): its
    parents' outputs, by step name, as a handler reads ``message.parent_outputs``. ``{}``
    for a step without parents, and outside a step (the task was enqueued on its own)."""
    try:
        from .tasks import running_step
    except ImportError:  # neither django.tasks nor the django-tasks backport: no task runs
        return {}
    message = running_step.get()
    return dict(message.parent_outputs) if message is not None else {}


class Step:
    """A step of a :class:`Workflow` (what :meth:`Workflow.step` returns): pass it in another
    step's ``after``. ``name`` is its key in its children's ``message.parent_outputs``."""

    __slots__ = (
        "workflow",
        "index",
        "name",
        "queue",
        "channel",
        "payload",
        "delay_ms",
        "max_attempts",
        "after",
        "task",
        "database",
    )

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
        self.task: dict[str, Any] | None = None  # a Django Task step's result row
        self.database = workflow.using  # the database alias its queue lives on

    def __repr__(self) -> str:
        return f"<Step {self.name!r} of {self.workflow.name!r}>"


class Workflow:
    """A DAG of steps to start in one SQL call, in the caller's transaction.

    ``channel`` is the steps' default channel (the tenant: steps are served fairly across
    channels like any message). A workflow lives on one database, with its steps' messages:
    ``using`` when given, else the database of its steps' queues (``LONNYMQ_QUEUE_DATABASES``,
    else ``LONNYMQ_DATABASE``); a step or an ``on_failure`` queue that lives on another is
    refused when it is added. Steps are declared with :meth:`step`; a step's ``after`` names
    its parents (steps of this workflow, or their names). :meth:`start` checks the graph (no
    cycle, no step after itself, no parent from another workflow, at most
    ``bounds.MAX_WORKFLOW_STEPS`` steps), writes it and returns the workflow id; it may be
    called once. ``using`` is then the alias it was written on (pass it to :func:`workflow`,
    :func:`cancel_workflow` and :func:`requeue_failed_steps`: workflow ids are per database).
    """

    def __init__(self, name: str, *, channel: str | None = None, using: str | None = None):
        self.name = arguments.name("name", name, bounds.MAX_WORKFLOW_NAME)
        self.channel = arguments.channel(channel) if channel is not None else None
        self._using = db.alias(using) if using is not None else None
        self.steps: list[Step] = []
        self._by_name: dict[str, Step] = {}
        self._named: dict[str, int] = {}  # default names given per queue
        self._on_failure: tuple[str, str, str, int] | None = None
        self.id: int | None = None

    @property
    def using(self) -> str:
        """The database alias the workflow is (or will be) written on: ``using`` when given,
        else its first step's queue's (or its ``on_failure`` queue's), else ``LONNYMQ_DATABASE``."""
        if self._using is not None:
            return self._using
        if self.steps:
            return self.steps[0].database
        if self._on_failure is not None:
            return routing.queue_database(self._on_failure[0])
        return db.alias(None)

    def _same_database(self, field: str, queue: str, database: str) -> None:
        """Refuse a queue on another database than the workflow's (nothing is added): one SQL
        call writes the workflow, and the acks that release its steps run on one database."""
        if self._using is not None or (not self.steps and self._on_failure is None):
            return
        if database != self.using:
            raise InvalidArgument(
                field,
                f"must live on the workflow's database {self.using!r} (LONNYMQ_QUEUE_DATABASES puts it on "
                f"{database!r}; a workflow's steps and on_failure queue share one database)",
                queue,
            )

    def _not_started(self) -> None:
        if self.id is not None:
            raise InvalidArgument("workflow", "was started already (start a new Workflow)", self.id)

    def step(
        self,
        queue: Any,
        payload: Any = _NO_PAYLOAD,
        *,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        after: Iterable[Step | str] | Step | str = (),
        name: str | None = None,
        channel: str | None = None,
        delay: timedelta | float | None = None,
        max_attempts: int | None = None,
    ) -> Step:
        """Add a step: a message of ``queue`` with ``payload``, released once every step in
        ``after`` has succeeded. ``name`` (default: the queue, then ``queue.2``, ``queue.3``...)
        is unique in the workflow. ``channel`` defaults to the workflow's (else "default").

        ``queue`` may be a Django Task (``@task``) of a ``LonnyMQBackend`` instead, called with
        ``args`` and ``kwargs`` (no ``payload``): it runs on its queue through the backend, its
        result row ends in a final state, and its return value is the step's output (default
        name: the task function's name)."""
        self._not_started()
        if len(self.steps) >= bounds.MAX_WORKFLOW_STEPS:
            raise InvalidArgument(
                "steps", f"must be at most {bounds.MAX_WORKFLOW_STEPS} per workflow", len(self.steps) + 1
            )
        task: Any = None
        if isinstance(queue, str):
            if payload is _NO_PAYLOAD:
                raise InvalidArgument(
                    "payload", "must be given for a queue's step (args and kwargs are for a task)", None
                )
            for field, given in (("args", args), ("kwargs", kwargs)):
                if given is not None:
                    raise InvalidArgument(
                        field,
                        "must be given only for a Django Task step (a queue's step has a payload)",
                        queue,
                    )
        else:
            if payload is not _NO_PAYLOAD:
                raise InvalidArgument(
                    "payload", "must not be given for a Django Task step (use args and kwargs)", payload
                )
            task = self._task(queue, args, kwargs, channel, max_attempts)
            queue, channel, payload, max_attempts = task.queue, task.channel, task.payload, task.max_attempts
        arguments.queue(queue)
        if self._using is not None:
            database = self._using
        else:
            database = task.database if task is not None else routing.queue_database(queue)
        self._same_database("queue", queue, database)
        channel = arguments.channel(channel if channel is not None else (self.channel or "default"))
        text = arguments.payload(payload)
        delay_ms = 0 if delay is None else duration_ms("delay", delay, bounds.MAX_AHEAD)
        attempts = arguments.integer(
            "max_attempts",
            settings.MAX_ATTEMPTS if max_attempts is None else max_attempts,
            1,
            bounds.MAX_ATTEMPTS,
        )
        named: tuple[str, int] | None = None  # the default name's counter, kept once the step is added
        if name is None:
            # The queue (a task step: the task function's name), then base.2, base.3...
            base = queue if task is None else task.record["task_path"].rpartition(".")[2]
            n = self._named.get(base, 0)
            name = base if n == 0 else f"{base}.{n + 1}"
            while name in self._by_name:
                n += 1
                name = f"{base}.{n + 1}"
            named = (base, n + 1)
        else:
            arguments.name("name", name, bounds.MAX_WORKFLOW_NAME)
            if name in self._by_name:
                raise InvalidArgument("name", "must be unique in the workflow", name)
        parents: list[Step | str] = []
        for parent in _parent_list("after", after):
            if isinstance(parent, Step):
                if parent.workflow is not self:
                    raise InvalidArgument(
                        "after",
                        "must name steps of the same workflow",
                        f"{parent.name!r} of {parent.workflow.name!r}",
                    )
            elif isinstance(parent, str):
                if parent == name:
                    raise InvalidArgument("after", "must not name the step itself", parent)
            else:
                raise InvalidArgument("after", "must be steps of this workflow or their names", parent)
            parents.append(parent)
        created = Step(self, len(self.steps), name, queue, channel, text, delay_ms, attempts, parents)
        created.task = task.record if task is not None else None
        created.database = database
        self.steps.append(created)
        self._by_name[name] = created
        if named is not None:
            self._named[named[0]] = named[1]
        return created

    def _task(self, task: Any, args: Any, kwargs: Any, channel: str | None, max_attempts: int | None) -> Any:
        """A Django Task given as a step, checked (:func:`django_lonnymq.tasks.step_task`)."""
        try:
            from . import tasks
        except ImportError as exc:  # neither django.tasks nor the django-tasks backport
            raise InvalidArgument(
                "queue", "must be a queue name (Django Tasks are not installed)", repr(task)
            ) from exc
        if not isinstance(task, tasks.Task):
            raise InvalidArgument("queue", "must be a queue name or a Django Task (@task)", repr(task))
        return tasks.step_task(
            task,
            () if args is None else args,
            {} if kwargs is None else kwargs,
            channel=channel,
            workflow_channel=self.channel,
            max_attempts=max_attempts,
            using=self._using,
        )

    def on_failure(
        self, queue: str, payload: Any, *, channel: str | None = None, max_attempts: int | None = None
    ) -> None:
        """A message enqueued once, when the workflow first fails (a step ends dead). Its
        ``message.workflow_id`` is the workflow's."""
        self._not_started()
        arguments.queue(queue)
        self._same_database("on_failure queue", queue, routing.queue_database(queue, self._using))
        channel = arguments.channel(channel if channel is not None else (self.channel or "default"))
        attempts = arguments.integer(
            "max_attempts",
            settings.MAX_ATTEMPTS if max_attempts is None else max_attempts,
            1,
            bounds.MAX_ATTEMPTS,
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
        using = self.using
        routing.refuse_cross_database("Workflow.start", using)
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
        results = [s for s in ordered if s.task is not None]
        if results:
            from . import tasks
            from .models import WorkflowStepRecord

            # The task steps' result rows, in the same transaction (message_id: the step's id).
            with transaction.atomic(using=using):
                self.id = int(statements.workflow_start(**params, on=using))
                ids = dict(
                    WorkflowStepRecord.objects.using(using)
                    .filter(workflow_id=self.id, name__in=[s.name for s in results])
                    .values_list("name", "id")
                )
                tasks.write_step_results(
                    [{**(s.task or {}), "message_id": ids[s.name]} for s in results], using
                )
        else:
            self.id = int(statements.workflow_start(**params, on=using))
        self._using = using
        eager.after_workflow(self.id, using)
        return self.id


def _parent_list(field: str, after: Any) -> list[Any]:
    """``after`` as a list: one step or name, or a list, tuple, set or iterator of them (the
    items are checked by :meth:`Workflow.step`)."""
    if isinstance(after, (Step, str)):
        return [after]
    if isinstance(after, (bytes, bytearray, Mapping)) or not isinstance(after, Iterable):
        raise InvalidArgument(
            field, "must be a step, a step's name, or a list of steps or names", type(after).__name__
        )
    return list(after)


# What chain() and chord() take in a step's dict: Workflow.step's arguments.
_STEP_ARGUMENTS = ("queue", "payload", "args", "kwargs", "after", "name", "channel", "delay", "max_attempts")


def _step_spec(field: str, spec: Any) -> dict[str, Any]:
    """A step of chain() or chord() as :meth:`Workflow.step`'s arguments: a ``(queue,
    payload)`` pair, or a dict of its arguments with a ``queue``."""
    if isinstance(spec, Mapping):
        unknown = sorted(str(k) for k in spec if k not in _STEP_ARGUMENTS)
        if unknown:
            raise InvalidArgument(field, f"must name only arguments of Workflow.step ({', '.join(_STEP_ARGUMENTS)})",
                                  unknown[0])  # fmt: skip
        if "queue" not in spec:
            raise InvalidArgument(f"{field}.queue", "must be given (a queue name or a Django Task)", None)
        kwargs = dict(spec)
        if "after" in kwargs:
            kwargs["after"] = _parent_list(f"{field}.after", kwargs["after"])
        return kwargs
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        return {"queue": spec[0], "payload": spec[1]}
    raise InvalidArgument(field, "must be a (queue, payload) pair or a dict of Workflow.step arguments", spec)


def _add_all(flow: Any, add: Any) -> Any:
    """Run ``add()`` on ``flow``; when it raises, the steps it added are taken back, so a
    refused chain() or chord() leaves the workflow as it was."""
    if not isinstance(flow, Workflow):
        raise InvalidArgument("flow", "must be a Workflow", type(flow).__name__)
    steps, by_name, named = list(flow.steps), dict(flow._by_name), dict(flow._named)
    try:
        return add()
    except BaseException:
        flow.steps, flow._by_name, flow._named = steps, by_name, named
        raise


def chain(flow: Workflow, *steps: tuple[str, Any] | dict[str, Any]) -> list[Step]:
    """Add steps to ``flow`` that run one after another: each ``(queue, payload)`` or a dict
    of :meth:`Workflow.step` arguments (``{"queue": ..., "payload": ..., "name": ...}``).
    All or nothing: a step refused leaves ``flow`` as it was."""

    def add() -> list[Step]:
        specs = [_step_spec(f"steps[{i}]", spec) for i, spec in enumerate(steps)]
        made: list[Step] = []
        for kwargs in specs:
            if made:
                kwargs["after"] = [made[-1], *kwargs.get("after", ())]
            made.append(flow.step(**kwargs))
        return made

    return list(_add_all(flow, add))


def chord(flow: Workflow, header: Sequence[Step | str], callback: tuple[str, Any] | dict[str, Any]) -> Step:
    """Add ``callback`` to ``flow``, after every step of ``header`` (Celery's chord; a list of
    at least one step or name): it reads their outputs in ``message.parent_outputs``."""

    def add() -> Step:
        if isinstance(header, (Step, str, bytes, bytearray, Mapping)) or not isinstance(header, Iterable):
            raise InvalidArgument("header", "must be a list of steps (or their names)", type(header).__name__)
        parents = list(header)
        if not parents:
            raise InvalidArgument("header", "must hold at least one step", parents)
        for i, parent in enumerate(parents):
            if not isinstance(parent, (Step, str)):
                raise InvalidArgument(f"header[{i}]", "must be a step of this workflow or its name", parent)
        kwargs = _step_spec("callback", callback)
        kwargs["after"] = [*parents, *kwargs.get("after", ())]
        return flow.step(**kwargs)

    made: Step = _add_all(flow, add)
    return made


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


def _unknown(workflow_id: Any, using: str | None) -> InvalidArgument:
    return InvalidArgument(
        "workflow_id",
        f"must name an existing workflow on database {db.alias(using)!r} (workflow ids are per database: "
        "pass using= for a workflow whose queues live on another)",
        workflow_id,
    )


def _state(workflow_id: int, using: str | None) -> str:
    """A workflow's state; an id of no workflow raises."""
    found = statements.workflow_state(id=workflow_id, on=using)
    if not found:
        raise _unknown(workflow_id, using)
    return str(found[0][3])


def workflow(workflow_id: int, *, using: str | None = None) -> WorkflowState:
    """A workflow's state and each step's state and times."""
    params = {"id": arguments.message_id("workflow_id", workflow_id)}
    found = statements.workflow_state(**params, on=using)
    if not found:
        raise _unknown(workflow_id, using)
    w = found[0]
    steps = tuple(
        StepState(r[0], r[1], r[2], r[3], r[4], _json(r[5]), r[6], r[7], r[8], r[9], tuple(r[10]))
        for r in statements.workflow_steps(**params, on=using)
    )
    return WorkflowState(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8], w[9], steps)


def cancel_workflow(workflow_id: int, *, using: str | None = None) -> int:
    """Cancel a workflow: waiting and queued steps at once, running ones as
    :func:`~django_lonnymq.api.cancel` does (their handlers are told and interrupted). A
    succeeded or cancelled workflow is left alone. Returns how many running steps were told."""
    params = {"id": arguments.message_id("workflow_id", workflow_id)}
    alias = db.alias(using)
    with transaction.atomic(using=alias):
        results = _task_results_of_unfinished_steps(params["id"], alias)
        told = int(statements.workflow_cancel(**params, on=alias))
        if results:
            from . import tasks
            from .models import WorkflowStepRecord

            cancelled = set(
                WorkflowStepRecord.objects.using(alias)
                .filter(id__in=list(results), state="cancelled")
                .values_list("id", flat=True)
            )
            tasks.end_cancelled_step_results([results[i] for i in cancelled], alias)
    return told


def _task_results_of_unfinished_steps(workflow_id: int, alias: str) -> dict[int, str]:
    """The result ids of a workflow's Django Task steps that have not run to an end (waiting:
    the step row holds the payload; queued: its message does), by step id. Nothing to read
    when no LonnyMQBackend is configured."""
    try:
        from . import tasks
    except ImportError:
        return {}
    if not tasks.lonnymq_backends():
        return {}
    from .models import Message as MessageRow
    from .models import WorkflowStepRecord

    steps = WorkflowStepRecord.objects.using(alias).filter(
        workflow_id=workflow_id, state__in=("waiting", "queued")
    )
    if not tasks.any_queue_is_a_task_queue():
        steps = steps.filter(queue__in=tasks.task_queues())  # only task queues hold task steps
    payloads = dict(steps.filter(state="waiting").values_list("id", "payload"))
    queued = list(steps.filter(state="queued").values_list("id", flat=True))
    payloads.update(MessageRow.objects.using(alias).filter(id__in=queued).values_list("id", "payload"))
    return {
        step_id: payload["result_id"]
        for step_id, payload in payloads.items()
        if isinstance(payload, dict)
        and isinstance(payload.get("task"), str)
        and isinstance(payload.get("result_id"), str)
    }


def requeue_failed_steps(workflow_id: int, *, using: str | None = None) -> list[int]:
    """Requeue the dead steps of a workflow (attempts reset): the workflow runs again. Returns
    the ids requeued (``[]``: none is dead). An id that names no workflow on ``using``
    (workflow ids are per database), or a cancelled workflow, raises
    :class:`~django_lonnymq.exceptions.InvalidArgument` and requeues nothing."""
    params = {"id": arguments.message_id("workflow_id", workflow_id)}
    state = _state(params["id"], using)
    if state == "cancelled":
        raise InvalidArgument(
            "workflow_id", "must name a workflow that is not cancelled (its steps stay dead)", workflow_id
        )
    ids = [int(r[0]) for r in statements.workflow_failed_steps(**params, on=using)]
    if not ids:
        return []
    requeued = list(
        statements.requeue_dead(
            ids=ids, reset_attempts=True, tolerance_ms=settings.ms("WAKE_TOLERANCE"), on=using
        )
    )
    if requeued:
        eager.after_workflow(params["id"], db.alias(using))
    return requeued


def counts(*, using: str | None = None) -> dict[str, int]:
    """How many workflows are in each state: running, succeeded, failed, cancelled."""
    return {str(state): int(n) for state, n in statements.workflow_counts(on=using)}


def prune(older_than: timedelta | float, *, limit: int = 1000, using: str | None = None) -> int:
    """Delete finished workflows (and their steps and outputs) finished more than
    ``older_than`` ago, up to ``limit``; one with a step message still queued, running or
    dead is kept. Returns how many were deleted."""
    params = {
        "older_than_ms": duration_ms("older_than", older_than, bounds.MAX_INTERVAL),
        "limit": arguments.integer("limit", limit, 1, 100_000),
    }
    return int(statements.workflow_prune(**params, on=using))


def run_eagerly(workflow_id: int, alias: str) -> None:
    """Eager mode (:mod:`django_lonnymq.eager`): run a workflow's steps in dependency order on
    this connection. Each round delivers the steps in the message table (``eager.run``, by
    queue, through the real dequeue and the workflow's ack); their acks release the next
    round's. The ``on_failure`` message runs once the workflow failed. It stops when a round
    finds nothing new to run (a step left undelivered in a paused channel is not retried)."""
    from .models import Message as MessageRow
    from .models import WorkflowRecord

    tried: set[int] = set()
    while True:
        state = workflow(workflow_id, using=alias)
        ready: dict[str, list[int]] = {}
        for step in state.steps:  # ids ascend along every edge
            if step.state == "queued" and step.attempts is not None and step.id not in tried:
                ready.setdefault(step.queue, []).append(step.id)
        failure = state.on_failure_message_id
        if failure is not None and failure not in tried:
            tried.add(failure)
            if MessageRow.objects.using(alias).filter(id=failure).exists():
                queue = (
                    WorkflowRecord.objects.using(alias)
                    .values_list("on_failure_queue", flat=True)
                    .get(id=workflow_id)
                )
                eager.run(str(queue), [failure], alias)
            continue
        if not ready:
            return
        for queue, ids in ready.items():
            tried.update(ids)
            eager.run(queue, ids, alias)
