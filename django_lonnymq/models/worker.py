"""Workers you can see: each worker keeps a ``lonnymq_worker`` row up to date.

The worker writes its row from its maintenance step (``worker.housekeeping.Presence``): one
``lonnymq_worker_beat_v1`` call every ``LONNYMQ_WORKER_HEARTBEAT``, on its own clock, never
one per message. A graceful shutdown marks the row stopped at once; a worker killed or cut
off stops beating and reads "lost" once silent for ``LONNYMQ_WORKER_LOST_AFTER``. Any worker's
beat deletes rows lost or stopped for longer than ``LONNYMQ_WORKER_PRUNE_AFTER``. This module
holds the rows' model and reads them (``listing``, ``serving``).

Names: a worker is named ``host:pid`` unless given one (``run_queue_worker --name``). A name
is unique among the rows: a worker whose name a live worker holds takes ``name#2`` (``#3``...)
instead, and leases under that name, so a message's ``leased_by`` always names one worker. A
name whose holder stopped or went lost is taken over by the next worker that asks for it.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q, QuerySet
from django.utils import timezone

from .. import arguments, db
from ..bounds import MAX_WORKER_NAME
from ..conf import lost_after
from ..exceptions import InvalidArgument
from .common import length
from .message import Message


class Worker(models.Model):
    """A worker process as its last heartbeat described it (:func:`listing` adds its state).

    ``state`` is ``live``, ``lost`` (silent longer than ``LONNYMQ_WORKER_LOST_AFTER``) or
    ``stopped`` (shut down gracefully). Rows are written by the workers only.
    """

    name = models.CharField(max_length=MAX_WORKER_NAME, primary_key=True)
    instance = models.UUIDField(help_text="This run of the worker (a restart is a new instance).")
    host = models.TextField()
    pid = models.IntegerField()
    queues = ArrayField(models.TextField())
    concurrency = models.IntegerField()
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)
    in_flight = models.IntegerField(
        default=0,
        help_text="Handler calls it held at its last heartbeat, running or waiting for a thread (a batch counts once).",
    )
    processed = models.BigIntegerField(default=0, help_text="Messages its handlers finished successfully.")
    failed = models.BigIntegerField(default=0, help_text="Messages its handlers failed (retried or dead).")

    class Meta:
        db_table = "lonnymq_worker"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(name__regex=length(MAX_WORKER_NAME)), name="lonnymq_worker_name_length"
            ),
            models.CheckConstraint(condition=Q(name__regex=r"\S"), name="lonnymq_worker_name_not_blank"),
            models.CheckConstraint(
                condition=Q(in_flight__gte=0, processed__gte=0, failed__gte=0, concurrency__gte=1),
                name="lonnymq_worker_counts_nonnegative",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def state(self) -> str:
        """``stopped``, ``lost`` or ``live`` (judged by this process's clock; the admin uses the database's)."""
        if self.stopped_at is not None:
            return "stopped"
        if self.heartbeat_at < timezone.now() - lost_after():
            return "lost"
        return "live"


# The listing: the rows with their state on the database's clock.

MAX_NAME = MAX_WORKER_NAME


def check_name(name: object) -> str:
    """A worker name: 1 to ``MAX_WORKER_NAME`` characters, not only blanks, no NUL."""
    return arguments.name("name", name, MAX_NAME)


def with_state(queryset: QuerySet[Worker]) -> QuerySet[Worker]:
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


def listing(state: str | None = None, *, using: str | None = None) -> QuerySet[Worker]:
    """The workers' rows, each with ``lq_state`` (``live``/``lost``/``stopped``, on the
    database's clock) and ``lq_leases`` (leases its name holds now); ``state`` keeps one."""
    rows = with_state(Worker.objects.using(db.alias(using)).all())
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
