"""Duties that features register with every worker: the worker package imports no feature
module (schedules, tasks, workflows, topics, api, admin), so a feature that needs a step of
its own in each worker's maintenance registers a factory here, from its app's ``ready()``.

A factory gets the worker's queues, its poll interval and its database alias, and returns an
object whose ``run(conn)`` is called at each maintenance step on the control connection (a
psycopg connection, or None while it reconnects). ``run`` keeps its own clock and should not
raise: an error is logged, and a lost connection is passed on for the worker to reconnect.

Observers come the same way: a feature that watches every worker's messages (the spans of
:mod:`django_lonnymq.tracing.worker`) registers a factory that gets the worker's control
connection and its held messages and returns an :class:`~django_lonnymq.worker.observer.Observer`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol


class Duty(Protocol):
    def run(self, conn: Any) -> None: ...


DutyFactory = Callable[[Sequence[str], float, str], Duty]

_factories: dict[str, DutyFactory] = {}


def register(name: str, factory: DutyFactory) -> None:
    """Every worker built from now on runs ``factory(queues, poll_interval, using)``'s duty
    (``name`` keeps one factory per feature: registering again replaces it)."""
    _factories[name] = factory


def build(queues: Sequence[str], poll_interval: float, using: str) -> list[tuple[str, Duty]]:
    """One duty of each registered feature for a worker serving ``queues`` on ``using``."""
    return [(name, factory(queues, poll_interval, using)) for name, factory in _factories.items()]


ObserverFactory = Callable[[Any, Any], Any]

_observer_factories: dict[str, ObserverFactory] = {}


def register_observer(name: str, factory: ObserverFactory) -> None:
    """Every worker built from now on attaches ``factory(connection, held)`` as an observer
    (``name`` keeps one factory per feature: registering again replaces it)."""
    _observer_factories[name] = factory


def build_observers(connection: Any, held: Any) -> list[Any]:
    """One observer of each registered feature for a worker's control connection and held messages."""
    return [factory(connection, held) for factory in _observer_factories.values()]
