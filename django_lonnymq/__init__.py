"""django-lonnymq: a fair, multi-tenant message queue in the PostgreSQL you already have.

Names are imported lazily so that ``django_lonnymq.spark`` (which runs on Spark executors)
can be imported without importing Django.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = [
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
    "enqueue",
    "enqueue_many",
    "chain",
    "chord",
    "handler",
    "periodic",
    "publish",
    "publish_many",
    "queue_database",
    "subscribe",
]

_PUBLIC = {
    "BatchFailed": "exceptions",
    "Discard": "exceptions",
    "Retry": "exceptions",
    "Snooze": "exceptions",
    "Item": "api",
    "enqueue": "api",
    "enqueue_many": "api",
    "aenqueue": "api",
    "aenqueue_many": "api",
    "Message": "message",
    "handler": "registry",
    "Event": "topics",
    "publish": "topics",
    "publish_many": "topics",
    "subscribe": "topics",
    "periodic": "schedules",
    "queue_database": "routing",
    "Workflow": "workflows",
    "chain": "workflows",
    "chord": "workflows",
}

if TYPE_CHECKING:
    from .api import Item, aenqueue, aenqueue_many, enqueue, enqueue_many
    from .exceptions import BatchFailed, Discard, Retry, Snooze
    from .message import Message
    from .registry import handler
    from .routing import queue_database
    from .schedules import periodic
    from .topics import Event, publish, publish_many, subscribe
    from .workflows import Workflow, chain, chord


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(import_module(f".{_PUBLIC[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
