"""The queue's tables as Django models: for the admin, for queries, and for users' reports.

The tables, indexes and constraints are defined in ``sql/schema.sql`` (installed by the migrations);
the models mirror them (the migration carries them as state only). Write to these tables
through :mod:`django_lonnymq.api`, which runs the SQL functions that keep the scheduler's
invariants; ORM updates of scheduler columns would bypass them.

One module per table family: :mod:`.plan`, :mod:`.channel`, :mod:`.message` (with the dedup
keys), :mod:`.queue` (queue limits and samples), :mod:`.dead`, :mod:`.task_result`,
:mod:`.worker` (the rows and their listing), :mod:`.topic`, :mod:`.schedule`, :mod:`.workflow`.
Import them from here: ``from django_lonnymq.models import Channel``.
"""

from .channel import Channel, ChannelQuerySet
from .dead import DeadMessage
from .message import DedupKey, Message
from .plan import Plan, QueuePlan
from .queue import QueueConfig, QueueSample
from .schedule import Schedule
from .task_result import TaskResultRecord
from .topic import Subscription, Unrouted
from .worker import Worker
from .workflow import WorkflowEdgeRecord, WorkflowRecord, WorkflowStepRecord

__all__ = [
    "Channel",
    "ChannelQuerySet",
    "DeadMessage",
    "DedupKey",
    "Message",
    "Plan",
    "QueueConfig",
    "QueuePlan",
    "QueueSample",
    "Schedule",
    "Subscription",
    "TaskResultRecord",
    "Unrouted",
    "Worker",
    "WorkflowEdgeRecord",
    "WorkflowRecord",
    "WorkflowStepRecord",
]
