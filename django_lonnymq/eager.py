"""Eager mode, for tests: a message's handler runs in-process as soon as its enqueue commits.

Turned on by ``LONNYMQ_EAGER = True`` or ``with django_lonnymq.testing.eager():``. The
message is still written by the real SQL function and then processed on the caller's own
connection through the real dequeue, ack and fail functions, so retries, backoff counting
and dead letters behave as with a worker; only the waiting is left out (a retry or a snooze
runs again at once, a scheduled message runs at once; snoozes stay bounded by
``LONNYMQ_MAX_SNOOZES``; a durable sleep goes on at once unless ``testing.eager_sleeps()``
says otherwise, and a durable wait resumes when the test emits its event).

When it runs, as it would at a real commit:

- outside any transaction: at once;
- inside ``transaction.atomic()`` with real transactions: when the transaction commits
  (``transaction.on_commit``), in registration order with the project's own callbacks;
- inside a Django ``TestCase``, whose transaction never commits: at once when the code runs
  in no ``atomic()`` block of its own, and otherwise when the outermost ``atomic()`` block of
  the code under test exits without error, which is where production would commit. A block
  that rolls back (or a savepoint rolled back by an exception caught inside the outer block)
  runs nothing. Those runs come before the project's own ``on_commit`` callbacks, which a
  ``TestCase`` only runs under ``captureOnCommitCallbacks(execute=True)``; eager mode takes
  its own callbacks off the list when it runs them, so ``captureOnCommitCallbacks`` shows only
  the project's.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from asgiref.sync import async_to_sync
from django.db import connections, transaction

from . import statements
from .conf import settings
from .exceptions import Suspended
from .message import Message, is_step, workflow_of
from .progress import Progress
from .worker import outcomes
from .worker.lifecycle import DjangoExecutor, Recorder, lease, record_progress
from .worker.observer import SignalObserver

logger = logging.getLogger("django_lonnymq.eager")

_forced: contextvars.ContextVar[bool] = contextvars.ContextVar("lonnymq_eager", default=False)
# A message that cannot be delivered now (a paused or capped channel) is left after this many
# empty dequeues instead of spinning.
_EMPTY_TRIES = 3


def enabled() -> bool:
    return _forced.get() or bool(settings.EAGER)


@contextmanager
def forced() -> Iterator[None]:
    watch_block_exits()
    token = _forced.set(True)
    try:
        yield
    finally:
        _forced.reset(token)


# A workflow's due steps run through their workflow (``workflows.run_eagerly``, registered by
# ``apps.ready``): the feature sits above eager mode, which only calls it.
_workflow_runner: Callable[[int, str], None] | None = None


def register_workflow_runner(runner: Callable[[int, str], None]) -> None:
    global _workflow_runner
    _workflow_runner = runner


# ---------------------------------------------------------------------------------------
# What producers call: with a worker nothing happens (the SQL functions notify it); in eager
# mode the messages run where the caller's commit would be. The switch is here, not in them.
# ---------------------------------------------------------------------------------------


def after_enqueue(queue: str, ids: Sequence[int], alias: str) -> None:
    """New messages of ``queue`` were written (see the module's docstring)."""
    if ids and enabled():
        when_committed(functools.partial(run, queue, list(ids), alias), alias)


def after_workflow(workflow_id: int, alias: str) -> None:
    """A workflow was started, or its dead steps requeued: its due steps run."""
    if enabled() and _workflow_runner is not None:
        when_committed(functools.partial(_workflow_runner, workflow_id, alias), alias)


def made_due(ids: Sequence[int], alias: str) -> None:
    """Existing messages were made due (a requeue of dead letters, a resume, an emitted event):
    plain ones run by queue, a workflow's step runs its workflow on, so the steps its success
    releases run too."""
    if ids and enabled():
        when_committed(functools.partial(_run_made_due, list(ids), alias), alias)


def _run_made_due(ids: list[int], alias: str) -> None:
    from .models import Message as MessageRow

    plain: dict[str, list[int]] = {}
    flows: set[int] = set()
    rows = MessageRow.objects.using(alias).filter(id__in=ids).values_list("id", "channel__queue", "dedup_key")
    for message_id, queue, dedup_key in rows.order_by("id"):
        workflow_id = workflow_of(dedup_key) if is_step(dedup_key) else None
        if workflow_id is not None:
            flows.add(workflow_id)
        else:
            plain.setdefault(queue, []).append(message_id)
    for queue, queue_ids in sorted(plain.items()):
        run(queue, queue_ids, alias)
    for workflow_id in sorted(flows):
        if _workflow_runner is not None:
            _workflow_runner(workflow_id, alias)


def when_committed(deliver: Any, alias: str) -> None:
    """Call ``deliver()`` where a real commit of the caller's transaction would be (see the
    module's docstring)."""
    conn = connections[alias]
    if not conn.in_atomic_block:
        deliver()
        return
    in_testcase = [_from_testcase(block) for block in conn.atomic_blocks]
    if all(in_testcase):
        deliver()
        return
    if any(in_testcase):
        # The test's transaction never commits: run at the exit of the code's outermost block.
        if watch_block_exits():
            # Watching began inside an open block, whose exit Python has already looked up:
            # that block would never run it, so run it now, as before watching existed.
            deliver()
            return
        deliver.lonnymq_eager = True
    transaction.on_commit(deliver, using=alias)


def _from_testcase(block: Any) -> bool:
    return bool(getattr(block, "_from_testcase", False))


_plain_exit: Any = None


def watch_block_exits() -> bool:
    """Make ``atomic()`` blocks run eager deliveries when the outermost block of the code under
    test exits inside a ``TestCase`` (once per process; other blocks pay one attribute check).
    True when it starts watching now, False when it already did.

    Installed when eager mode is turned on (``testing.eager()``, ``LONNYMQ_EAGER`` at start or
    through ``override_settings``), before the blocks it must watch open: a ``with`` statement
    looks up ``__exit__`` when the block opens. Django drops the ``on_commit`` callbacks of a
    savepoint that rolls back, so what is left of ours at that exit is exactly what a real
    commit would have run.
    """
    global _plain_exit
    if _plain_exit is not None:
        return False
    _plain_exit = transaction.Atomic.__exit__

    def exit_then_deliver(block: Any, exc_type: Any, exc_value: Any, traceback: Any) -> Any:
        conn = transaction.get_connection(block.using)
        blocks = conn.atomic_blocks
        outermost = (
            len(blocks) >= 2
            and blocks[-1] is block
            and not _from_testcase(block)
            and all(_from_testcase(b) for b in blocks[:-1])
        )
        result = _plain_exit(block, exc_type, exc_value, traceback)
        if outermost:
            _run_pending(conn, succeeded=exc_type is None and not conn.needs_rollback)
        return result

    transaction.Atomic.__exit__ = exit_then_deliver  # type: ignore[method-assign]
    return True


def watch_when_turned_on(*, setting: str, value: Any, **_: Any) -> None:
    """``setting_changed`` receiver: ``override_settings(LONNYMQ_EAGER=True)`` starts watching."""
    if setting == "LONNYMQ_EAGER" and value:
        watch_block_exits()


def _run_pending(conn: Any, *, succeeded: bool) -> None:
    """Take eager deliveries off the connection's ``on_commit`` list and run them in order
    (``succeeded=False``: the block failed; a savepoint-less block's are dropped here)."""
    pending = [entry for entry in conn.run_on_commit if getattr(entry[1], "lonnymq_eager", False)]
    if not pending:
        return
    conn.run_on_commit = [
        entry for entry in conn.run_on_commit if not getattr(entry[1], "lonnymq_eager", False)
    ]
    for _, deliver, *_rest in pending if succeeded else ():
        deliver()


def run(queue: str, ids: list[int], alias: str) -> None:
    """Deliver the queue's due messages on this connection until ``ids`` are acked or dead."""
    from .registry import autodiscover, batch_of, get_handler

    autodiscover()
    handle = get_handler(queue)
    spec = batch_of(queue)
    waiting = set(ids)
    empty = 0
    while waiting and empty < _EMPTY_TRIES:
        statements.run_now(ids=sorted(waiting), tolerance_ms=settings.ms("WAKE_TOLERANCE"), on=alias)
        executor = DjangoExecutor(alias)

        def report(message: Message, progress: Progress, on: DjangoExecutor = executor) -> None:
            # Each report written at once, in the caller's transaction (a test reads it back).
            record_progress(on, [(message, progress)])

        messages = lease(
            executor,
            queue,
            100,
            worker="eager",
            lease_ms=settings.ms("LEASE"),
            using=alias,
            eager=True,
            report=report,
        )
        if not messages:
            empty += 1
            continue
        empty = 0
        recorder = Recorder(executor, SignalObserver(), at_once=True)
        if spec is not None:
            for batch in batches_of(messages, spec.size):
                for message_id, result in _deliver_batch(recorder, handle, batch).items():
                    if result not in ("retry", "snoozed"):
                        waiting.discard(message_id)
            continue
        for message in messages:
            if _deliver(recorder, handle, message) not in ("retry", "snoozed"):
                waiting.discard(message.id)
    if waiting:
        logger.warning("eager mode left message(s) %s of %s undelivered (channel paused or at its cap?)",
                       sorted(waiting), queue)  # fmt: skip


def _new_savepoint(alias: str) -> Any:
    """A savepoint on ``alias``: ``savepoint_create`` where Django has it (6.1 deprecates
    ``savepoint()``), ``savepoint`` before."""
    create = getattr(transaction, "savepoint_create", None) or transaction.savepoint
    return create(using=alias)


def batches_of(messages: list[Message], size: int) -> list[list[Message]]:
    """A batch handler's calls for what one dequeue leased: each channel's messages in
    batches of at most ``size``, the channels in the order the round robin gave them."""
    by_channel: dict[str, list[Message]] = {}
    for message in messages:
        by_channel.setdefault(message.channel, []).append(message)
    return [found[i : i + size] for found in by_channel.values() for i in range(0, len(found), size)]


def _deliver_batch(recorder: Recorder, handle: Any, batch: list[Message]) -> dict[int, str | None]:
    """Run a batch handler's call as a worker does, in a savepoint that a raised exception
    (other than ``BatchFailed``, which acks the rest) rolls back; each message's recording."""
    from .exceptions import BatchFailed
    from .registry import is_async

    alias = batch[0]._durable.using
    call = async_to_sync(handle) if is_async(handle) else handle
    results: dict[int, str | None] = {}
    runnable = []
    for message in batch:
        refused = outcomes.refused(message)
        if refused is not None:
            results[message.id] = recorder.fail(refused)
        else:
            message._batched = True
            recorder.observers.handler_started(message)
            runnable.append(message)
    if not runnable:
        return results

    def in_savepoint(messages: list[Message]) -> object:
        failure: BaseException | None = None
        result: object = None
        with transaction.atomic(using=alias):
            savepoint = _new_savepoint(alias)
            try:
                result = call(messages)
            except BatchFailed as exc:  # the messages it does not name succeeded: keep the writes
                transaction.savepoint_commit(savepoint, using=alias)
                failure = exc
            except BaseException as exc:
                transaction.savepoint_rollback(savepoint, using=alias)
                failure = exc
            else:
                transaction.savepoint_commit(savepoint, using=alias)
        if failure is not None:
            raise failure
        return result

    found = outcomes.run_batch(in_savepoint, runnable)
    acks = [o for o in found if o.action == "ack"]
    plain = [o for o in acks if o.message.step_name is None]
    steps = [o for o in acks if o.message.step_name is not None]
    lost = {o.message.id for o in (recorder.ack(plain) if plain else [])}
    lost |= {o.message.id for o in (recorder.ack_steps(steps) if steps else [])}
    for outcome in found:
        if outcome.action == "ack":
            results[outcome.message.id] = None if outcome.message.id in lost else "ack"
        else:
            results[outcome.message.id] = recorder.fail(outcome)
    return results


def _deliver(recorder: Recorder, handle: Any, message: Message) -> str | None:
    """Run a leased message's handler as a worker does (``worker/outcomes.py``), on the caller's
    connection, and record its outcome through the worker's own :class:`Recorder`; retries and
    snoozes are due at once. The recording's result ("retry", "snoozed", "suspended", "dead"),
    or "ack"."""
    from .registry import is_async

    alias = message._durable.using
    call = async_to_sync(handle) if is_async(handle) else handle

    def in_savepoint(message: Message) -> object:
        # A savepoint: a failing handler's writes go, as its failed transaction would; but
        # not its durable steps, which commit on their own with a worker: each checkpoint
        # moves the savepoint past it.
        failure: BaseException | None = None
        with transaction.atomic(using=alias):
            savepoint = _new_savepoint(alias)

            def past_checkpoint() -> None:
                nonlocal savepoint
                transaction.savepoint_commit(savepoint, using=alias)
                savepoint = _new_savepoint(alias)

            message._durable.on_checkpoint = past_checkpoint
            try:
                result = call(message)
            except Suspended:
                # A durable sleep or wait: the run ends suspended (message._suspended_on).
                result = None
            except BaseException as exc:
                transaction.savepoint_rollback(savepoint, using=alias)
                failure = exc
            else:
                transaction.savepoint_commit(savepoint, using=alias)
        if failure is not None:
            raise failure
        return result

    refused = outcomes.refused(message)
    if refused is None:
        recorder.observers.handler_started(message)
    # The task backend's handler makes its own savepoint around the task (its result's
    # status and errors stay when the task fails).
    own = getattr(handle, "lonnymq_own_savepoint", False)
    outcome = refused or outcomes.run(call if own else in_savepoint, message)
    if outcome.action == "ack":
        # A step's ack records its output and releases its ready children, as a worker's does.
        lost = (recorder.ack if message.step_name is None else recorder.ack_steps)([outcome])
        return None if lost else "ack"
    # A durable wait (or a sleep under testing.eager_sleeps(real=True)) stays suspended; an
    # emit_event (or testing.resume) runs it again. Snoozes stay bounded as in a worker: an
    # endless snoozer ends in failures, then dead.
    return recorder.fail(outcome)
