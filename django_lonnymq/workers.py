"""Workers you can see: each worker keeps a ``lonnymq_worker`` row up to date.

The worker writes its row from its maintenance step (``worker.housekeeping.Presence``): one
``lonnymq_worker_beat_v1`` call every ``LONNYMQ_WORKER_HEARTBEAT``, on its own clock, never
one per message. A graceful shutdown marks the row stopped at once; a worker killed or cut
off stops beating and reads "lost" once silent for ``LONNYMQ_WORKER_LOST_AFTER``. Any worker's
beat deletes rows lost or stopped for longer than ``LONNYMQ_WORKER_PRUNE_AFTER``. This module
reads the rows.

Names: a worker is named ``host:pid`` unless given one (``run_queue_worker --name``). A name
is unique among the rows: a worker whose name a live worker holds takes ``name#2`` (``#3``...)
instead, and leases under that name, so a message's ``leased_by`` always names one worker. A
name whose holder stopped or went lost is taken over by the next worker that asks for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import arguments, bounds, db
from .conf import lost_after

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from .models import Worker as WorkerRow

MAX_NAME = bounds.MAX_WORKER_NAME


def check_name(name: object) -> str:
    """A worker name: 1 to 200 characters, not only blanks, no NUL."""
    return arguments.name("name", name, MAX_NAME)


def with_state(queryset: QuerySet[WorkerRow]) -> QuerySet[WorkerRow]:
    """Workers annotated with ``lq_state`` (on the database's clock) and ``lq_leases``, the
    leases their name holds now (through the in-flight index: only leased messages are read)."""
    from django.db.models import (
        Case,
        Count,
        DateTimeField,
        ExpressionWrapper,
        IntegerField,
        OuterRef,
        Subquery,
        Value,
        When,
    )
    from django.db.models.functions import Coalesce, Now

    from .models import Message

    cutoff = ExpressionWrapper(Now() - Value(lost_after()), output_field=DateTimeField())
    leases = (
        Message.objects.filter(leased_by=OuterRef("name"), lease_until__isnull=False)
        .order_by()
        .values("leased_by")
        .annotate(n=Count("id"))
        .values("n")
    )
    return queryset.annotate(
        lq_state=Case(
            When(stopped_at__isnull=False, then=Value("stopped")),
            When(heartbeat_at__lt=cutoff, then=Value("lost")),
            default=Value("live"),
        ),
        lq_leases=Coalesce(Subquery(leases, output_field=IntegerField()), Value(0)),
    )


STATES = ("live", "lost", "stopped")


def listing(state: str | None = None, *, using: str | None = None) -> QuerySet[WorkerRow]:
    """The workers' rows, each with ``lq_state`` (``live``/``lost``/``stopped``, on the
    database's clock) and ``lq_leases`` (leases its name holds now); ``state`` keeps one."""
    from .exceptions import InvalidArgument
    from .models import Worker as WorkerRow

    rows = with_state(WorkerRow.objects.using(db.alias(using)).all())
    if state is None:
        return rows
    if state not in STATES:
        raise InvalidArgument("state", f"must be one of {', '.join(STATES)}", state)
    return rows.filter(lq_state=state)  # type: ignore[misc]  # annotated by with_state


def serving(queue: str, *, using: str | None = None) -> tuple[int, int]:
    """Live workers serving ``queue``, and how many of those were full at their last
    heartbeat (as many messages held as handler threads): why ready work may wait."""
    from django.db.models import Count, F, Q

    found = (
        listing("live", using=using)
        .filter(queues__contains=[queue])
        .aggregate(live=Count("pk"), full=Count("pk", filter=Q(in_flight__gte=F("concurrency"))))
    )
    return found["live"] or 0, found["full"] or 0
