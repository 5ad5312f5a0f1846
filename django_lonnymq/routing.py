"""Which database a queue lives on: ``LONNYMQ_QUEUE_DATABASES`` maps a queue name to a Django
database alias; a queue it does not name lives on ``LONNYMQ_DATABASE``.

Every call that names a queue (enqueue, publish, configure, pause, the Tasks backend, the
worker, the Spark export command) runs on :func:`queue_database` of that queue unless its
caller passes ``using=``, which always wins. A mapping, not a router method: the commands and
pages that look at every queue (stats, health, ``/metrics``, the admin, publish) must be able
to list the databases that hold queues (:func:`queue_databases`), which a per-queue function
cannot tell. docs/scaling.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connections

from .arguments import queue as check_queue
from .conf import settings
from .exceptions import CrossDatabaseTransaction, CrossDatabaseWarning, InvalidArgument, LonnyMQError


def _mapping() -> Mapping[str, str]:
    mapping = settings.QUEUE_DATABASES
    return mapping if isinstance(mapping, Mapping) else {}  # lonnymq.E250 reports a bad value


def queue_database(queue: str, using: str | None = None) -> str:
    """The database alias of ``queue``: ``using`` when given, else its entry in
    ``LONNYMQ_QUEUE_DATABASES``, else ``LONNYMQ_DATABASE``."""
    if using is not None:
        if not isinstance(using, str) or using not in connections.settings:
            raise InvalidArgument(
                "using", f"must name a database alias in DATABASES ({', '.join(connections)})", using
            )
        return using
    if settings.QUEUE_DATABASES:
        alias = _mapping().get(queue)
        if alias is not None:
            return str(alias)
    return str(settings.DATABASE)


def queue_databases() -> list[str]:
    """Every alias that may hold queues: ``LONNYMQ_DATABASE`` first, then each mapped one."""
    found = [str(settings.DATABASE)]
    for alias in _mapping().values():
        if alias not in found:
            found.append(str(alias))
    return found


def by_database(queues: Iterable[str], using: str | None = None) -> dict[str, list[str]]:
    """``queues`` grouped by database alias (in first-seen order; one group when ``using``)."""
    groups: dict[str, list[str]] = {}
    for queue in queues:
        group = groups.setdefault(queue_database(queue, using), [])
        if queue not in group:
            group.append(queue)
    return groups


def databases_of(using: str | None) -> list[str]:
    """The aliases a command that looks at every queue reads: ``using`` alone when given
    (``--database``), else :func:`queue_databases`."""
    if using is not None:
        return [queue_database("", using)]
    return queue_databases()


def mapping_problems(value: Any) -> list[str]:
    """What is wrong with a ``LONNYMQ_QUEUE_DATABASES`` value (empty: nothing)."""
    if not isinstance(value, Mapping):
        return [f"must be a dict of queue name to database alias, got {type(value).__name__} {value!r}"]
    problems = []
    for queue, alias in value.items():
        try:
            check_queue(queue, "LONNYMQ_QUEUE_DATABASES key")
        except LonnyMQError as exc:
            problems.append(str(exc))
            continue
        if not isinstance(alias, str) or alias not in connections.settings:
            problems.append(
                f"queue {queue!r} maps to {alias!r}, which is not a database alias in DATABASES "
                f"({', '.join(sorted(connections.settings))})"
            )
        elif connections[alias].vendor != "postgresql":
            problems.append(
                f"queue {queue!r} maps to {alias!r}, which is {connections[alias].vendor}, not PostgreSQL"
            )
    return problems


def refuse_cross_database(what: str, alias: str) -> None:
    """Before ``what`` writes on ``alias`` outside a transaction there while one is open on
    another alias of this thread: it would commit at once and survive that transaction's
    rollback. ``LONNYMQ_CROSS_DATABASE_ENQUEUE`` says what then: ``"warn"`` (a
    :class:`CrossDatabaseWarning`, and the write goes ahead), ``"raise"``
    (:class:`CrossDatabaseTransaction`, nothing written) or ``"allow"``."""
    if len(connections.settings) < 2:  # one database: nothing to escape (most projects)
        return
    mode = settings.CROSS_DATABASE_ENQUEUE
    if mode == "allow" or connections[alias].in_atomic_block:
        return
    open_on = [
        other for other in connections.settings if other != alias and connections[other].in_atomic_block
    ]
    if not open_on:
        return
    text = (
        f"{what} writes on database {alias!r}, which is not in a transaction, while a transaction is open on "
        f"{', '.join(repr(a) for a in open_on)}: it commits at once, and a rollback there will not undo it. "
        f"Open transaction.atomic(using={alias!r}) too (the message then commits with that transaction), "
        "or set LONNYMQ_CROSS_DATABASE_ENQUEUE"
    )
    if mode == "warn":
        warnings.warn(text + ' = "allow" to write so without a warning', CrossDatabaseWarning, stacklevel=3)
        return
    raise CrossDatabaseTransaction(
        text + ' = "warn" or "allow" to let it commit at once; nothing was written'
    )
