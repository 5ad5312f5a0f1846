"""A Django Tasks backend: ``@task`` functions run on the fair queue.

Configure it in place of any other backend::

    TASKS = {
        "default": {
            "BACKEND": "django_lonnymq.tasks.LonnyMQBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"CHANNEL_KWARG": "tenant_id"},
        }
    }

Works with ``django.tasks`` (Django 6) and the ``django-tasks`` backport (Django 5.2); the
import is chosen at run time. Each task queue is a django-lonnymq queue; the tenant channel
comes from :func:`channel` (a context manager), the ``CHANNEL_KWARG`` option, or
``DEFAULT_CHANNEL``; a dedup key and its mode come from :func:`dedup` (a context manager,
docs/tasks.md). Priority 0..100 maps onto the queue's priority; negative priorities
cannot be expressed (priority only moves work earlier) and are refused by ``validate_task``.
Results are stored in ``lonnymq_task_result``, apart from the queue's hot tables.

The worker runs a task message only if its path names a ``Task`` object found in an
installed app's ``tasks`` module (or a module in ``OPTIONS["TASK_MODULES"]``): a payload
can never make the worker import arbitrary code. Every run ends its result in a final state
(or ``READY`` again while retries remain) with the error recorded, and sends
``task_started`` and ``task_finished``, whatever stopped it: an exception (``SystemExit``
and ``KeyboardInterrupt`` included), a return value that cannot be stored as JSON, a path
that is not a task, or a backend alias that is not configured.


One module per job: :mod:`.backend`, :mod:`.context`, :mod:`.results`, :mod:`.checks`,
:mod:`.discovery`, :mod:`.runner` (the worker side), :mod:`.periodic`, :mod:`.steps`
(workflow steps), and :mod:`.framework` (Django 6 or the backport). Import from here.
"""

from .backend import LonnyMQBackend, any_queue_is_a_task_queue, lonnymq_backends, task_queues
from .checks import OPTION_NAMES, _backend_checks
from .context import channel, dedup, running_step
from .discovery import find_task, known_tasks
from .framework import (
    DEFAULT_TASK_BACKEND_ALIAS,
    DEFAULT_TASK_QUEUE_NAME,
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    _task_signals,
    task_backends,
)
from .periodic import periodic_message
from .runner import abandon_task_message, all_task_queues, register_task_handlers, run_task_message
from .steps import StepTask, end_cancelled_step_results, step_task, write_step_results

__all__ = [
    "BaseTaskBackend",
    "DEFAULT_TASK_BACKEND_ALIAS",
    "DEFAULT_TASK_QUEUE_NAME",
    "InvalidTask",
    "InvalidTaskBackend",
    "LonnyMQBackend",
    "OPTION_NAMES",
    "StepTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "_backend_checks",
    "_task_signals",
    "abandon_task_message",
    "all_task_queues",
    "any_queue_is_a_task_queue",
    "channel",
    "dedup",
    "end_cancelled_step_results",
    "find_task",
    "known_tasks",
    "lonnymq_backends",
    "periodic_message",
    "register_task_handlers",
    "run_task_message",
    "running_step",
    "step_task",
    "task_backends",
    "task_queues",
    "write_step_results",
]
