"""What users import stays where it is: every name of ``django_lonnymq.__all__`` and of the
documented module paths. A rename or a move fails here first (extend these lists when a
public name is added; removing one is a breaking change for the CHANGELOG)."""

from __future__ import annotations

import importlib

import pytest

import django_lonnymq

TOP_LEVEL = [
    "BatchFailed",
    "Discard",
    "Event",
    "Item",
    "Message",
    "Retry",
    "Snooze",
    "Workflow",
    "aenqueue",
    "aenqueue_many",
    "chain",
    "chord",
    "enqueue",
    "enqueue_many",
    "handler",
    "periodic",
    "publish",
    "publish_many",
    "queue_database",
    "subscribe",
]

DOCUMENTED = {
    "django_lonnymq.api": [
        "Item", "Problem", "aenqueue", "aenqueue_many", "cancel", "cancel_rows", "check",
        "configure_channel", "configure_plan", "configure_queue", "delete_channel", "delete_plan", "enqueue", "enqueue_many",
        "now_ms", "pause_queue", "purge_channel", "purge_dead", "reap", "requeue_dead", "resume_queue",
        "run_now", "workflow", "cancel_workflow",
    ],
    "django_lonnymq.workflows": [
        "Step", "StepState", "Workflow", "WorkflowState", "cancel_workflow", "chain", "chord", "prune",
        "parent_outputs", "requeue_failed_steps", "workflow",
    ],
    "django_lonnymq.signals": ["message_dead", "message_finished", "message_started"],
    "django_lonnymq.testing": ["assert_enqueued", "assert_nothing_enqueued", "drain", "eager", "enqueued", "tick"],
    "django_lonnymq.tasks": ["LonnyMQBackend", "channel", "dedup"],
    "django_lonnymq.spark": ["export"],
    "django_lonnymq.rates": ["Rate"],
    "django_lonnymq.logs": ["Formatter", "LOGGER", "build_formatter", "configure_console"],
    "django_lonnymq.exceptions": [
        "ChannelGone", "ChannelNotDeleted", "Discard", "HandlerCancelled", "HandlerTimeout", "InvalidArgument", "LeaseLost", "LockTableFull",
        "LonnyMQError", "MessageNotFound", "NoHandler", "PayloadError", "PlanInUse", "PriorityWithSchedule", "Retry", "SchemaMissing",
        "Snooze", "UnknownMessage", "UnknownPlan", "UnknownTask", "UnsupportedIsolation", "WorkerInterrupted",
        "WorkflowCancelled",
    ],
    "django_lonnymq.models": [
        "Channel", "DeadMessage", "Message", "Plan", "QueueConfig", "QueuePlan", "QueueSample", "Schedule", "Subscription",
        "TaskResultRecord", "Unrouted", "Worker", "WorkflowEdgeRecord", "WorkflowRecord", "WorkflowStepRecord",
    ],
    "django_lonnymq.models.worker": ["listing", "serving"],
    "django_lonnymq.workers": ["listing"],  # the old address, kept for existing imports
    "django_lonnymq.worker": ["Worker", "WorkerGroup"],
    "django_lonnymq.routing": ["queue_database", "queue_databases"],
    "django_lonnymq.topics": ["Event", "publish", "publish_many", "subscribe", "sync_subscriptions"],
    "django_lonnymq.schedules": ["periodic"],
    "django_lonnymq.registry": ["handler"],
    "django_lonnymq.prometheus": ["metrics"],
    "django_lonnymq.alarms": ["HEALTH_COUNT_CAP"],
    "django_lonnymq.pytest_plugin": ["lonnymq_drain", "lonnymq_eager", "lonnymq_enqueued"],
}  # fmt: skip


def test_the_top_level_names_are_exactly_these():
    assert sorted(django_lonnymq.__all__) == sorted(TOP_LEVEL)
    for name in TOP_LEVEL:
        assert getattr(django_lonnymq, name) is not None


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_every_documented_name_imports_from_its_module(module: str):
    loaded = importlib.import_module(module)
    missing = [name for name in DOCUMENTED[module] if not hasattr(loaded, name)]
    assert missing == []


def test_the_top_level_names_are_the_documented_objects():
    from django_lonnymq import api, exceptions, message, registry, schedules, topics

    assert django_lonnymq.enqueue is api.enqueue and django_lonnymq.Item is api.Item
    assert django_lonnymq.Retry is exceptions.Retry and django_lonnymq.Message is message.Message
    assert django_lonnymq.handler is registry.handler and django_lonnymq.periodic is schedules.periodic
    assert django_lonnymq.publish is topics.publish


def test_the_version_is_defined_once():
    from importlib.metadata import version

    assert version("django-lonnymq") == django_lonnymq.__version__
