"""The queue's tables as Django models: for the admin, for queries, and for users' reports.

The tables, indexes and constraints are defined in ``sql/schema.sql`` (installed by the migrations);
the models mirror them (the migration carries them as state only). Write to these tables
through :mod:`django_lonnymq.api`, which runs the SQL functions that keep the scheduler's
invariants; ORM updates of scheduler columns would bypass them.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models, router, transaction
from django.db.models import F, Q
from django.utils import timezone

from . import db
from .bounds import (
    MAX_ATTEMPTS,
    MAX_CATCH_UP,
    MAX_CHANNEL_NAME,
    MAX_DEDUP_KEY,
    MAX_EPOCH_MS,
    MAX_INTERVAL_MS,
    MAX_PLAN_NAME,
    MAX_PRIORITY,
    MAX_QUEUE_NAME,
    MAX_RATE_BURST,
    MAX_RATE_COUNT,
    MAX_SCHEDULE_NAME,
    MAX_TOPIC_NAME,
    MAX_WEIGHT,
    MAX_WORKER_NAME,
    MAX_WORKFLOW_NAME,
    MIN_EVERY,
)
from .exceptions import ChannelNotDeleted

MIN_EVERY_MS = int(MIN_EVERY.total_seconds() * 1000)


def _length(most: int) -> str:
    """The pattern of a name's length CHECK: 1 to ``most`` characters."""
    return f"^.{{1,{most}}}$"


class Plan(models.Model):
    """A named set of limits (a pricing tier) that channels follow: a channel takes its plan's
    value of every limit it does not set itself. Write it through
    :func:`django_lonnymq.api.configure_plan` (the admin does): a change reaches every channel
    of the plan in one statement."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=MAX_PLAN_NAME, unique=True)
    weight = models.IntegerField(
        default=1, help_text=f"Messages released per round under backlog (1 to {MAX_WEIGHT})."
    )
    max_concurrency = models.IntegerField(
        null=True, blank=True, help_text="Most messages of a channel in flight at once; empty: unlimited."
    )
    release_interval_ms = models.BigIntegerField(
        default=0, help_text="Least time between two releases of a channel, in milliseconds (0: none)."
    )
    rate_count = models.IntegerField(null=True, blank=True)
    rate_period_ms = models.BigIntegerField(null=True, blank=True)
    rate_burst = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        db_table = "lonnymq_plan"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(name__regex=_length(MAX_PLAN_NAME)), name="lonnymq_plan_name_length"
            ),
            models.CheckConstraint(condition=Q(name__regex=r"\S"), name="lonnymq_plan_name_not_blank"),
            models.CheckConstraint(
                condition=Q(weight__gte=1, weight__lte=MAX_WEIGHT), name="lonnymq_plan_weight_range"
            ),
            models.CheckConstraint(
                condition=Q(max_concurrency__isnull=True) | Q(max_concurrency__gt=0),
                name="lonnymq_plan_max_concurrency_positive",
            ),
            models.CheckConstraint(
                condition=Q(release_interval_ms__gte=0, release_interval_ms__lte=MAX_INTERVAL_MS),
                name="lonnymq_plan_release_interval_range",
            ),
            models.CheckConstraint(
                condition=Q(rate_count__isnull=True, rate_period_ms__isnull=True, rate_burst__isnull=True)
                | Q(rate_count__isnull=False, rate_period_ms__isnull=False, rate_burst__isnull=False),
                name="lonnymq_plan_rate_complete",
            ),
            models.CheckConstraint(
                condition=Q(rate_count__gte=1, rate_count__lte=MAX_RATE_COUNT),
                name="lonnymq_plan_rate_count_range",
            ),
            models.CheckConstraint(
                condition=Q(rate_period_ms__gte=1, rate_period_ms__lte=MAX_INTERVAL_MS),
                name="lonnymq_plan_rate_period_range",
            ),
            models.CheckConstraint(
                condition=Q(rate_burst__gte=1, rate_burst__lte=MAX_RATE_BURST),
                name="lonnymq_plan_rate_burst_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def rate(self):  # -> Rate | None
        from .rates import Rate

        return Rate.from_ms(self.rate_count, self.rate_period_ms, self.rate_burst)


class QueuePlan(models.Model):
    """The plan a queue's new channels follow (``configure_queue(queue, default_plan=...)``)."""

    queue = models.CharField(max_length=MAX_QUEUE_NAME, primary_key=True)
    plan = models.ForeignKey(Plan, on_delete=models.PROTECT, related_name="default_of")
    updated_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        db_table = "lonnymq_queue_plan"
        ordering = ["queue"]
        verbose_name = "queue default plan"
        constraints = [
            models.CheckConstraint(
                condition=Q(queue__regex=_length(MAX_QUEUE_NAME)), name="lonnymq_queue_plan_queue_length"
            ),
            models.CheckConstraint(
                condition=Q(queue__regex=r"\S"), name="lonnymq_queue_plan_queue_not_blank"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}: {self.plan_id}"


def _delete_channels(ids: list[int], using: str) -> int:
    """Delete channels as ``api.delete_channel`` does, all or none (one transaction). Django's
    own delete looked for a channel's messages before it waited for the producers holding the
    channel (a message they committed meanwhile lost its channel), read the whole message table
    to do so (no index leads from a channel to its messages), and left the channel's wake-up
    marks behind."""
    deleted = 0
    with transaction.atomic(using=using):
        for channel_id in sorted(ids):
            outcome = db.value("delete_channel", {"id": channel_id}, using=using)
            if outcome == "deleted":
                deleted += 1
            elif outcome != "missing":
                raise ChannelNotDeleted(channel_id, str(outcome))
    return deleted


class ChannelQuerySet(models.QuerySet["Channel"]):
    def delete(self) -> tuple[int, dict[str, int]]:
        """Each channel through ``lonnymq_delete_channel_v1``; raises :class:`ChannelNotDeleted`
        (and deletes none) when one holds messages or is held now."""
        using = getattr(self, "_db", None) or router.db_for_write(self.model)
        deleted = _delete_channels(list(self.using(using).values_list("pk", flat=True)), using)
        return deleted, {Channel._meta.label: deleted}

    delete.alters_data = True  # type: ignore[attr-defined]
    delete.queryset_only = True  # type: ignore[attr-defined]


class Channel(models.Model):
    """A tenant's virtual queue inside a queue, with its limits and scheduler state."""

    objects = ChannelQuerySet.as_manager()

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=MAX_QUEUE_NAME)
    name = models.CharField(max_length=MAX_CHANNEL_NAME)
    max_concurrency = models.IntegerField(
        null=True,
        blank=True,
        help_text="Most messages of this channel in flight at once; empty means unlimited.",
    )
    release_interval_ms = models.BigIntegerField(
        default=0,
        help_text="Rate limit: least time between two releases, in milliseconds (0: none).",
    )
    paused = models.BooleanField(default=False, help_text="A paused channel releases nothing.")
    in_flight = models.IntegerField(
        default=0, editable=False, help_text="Leases that took a concurrency slot."
    )
    last_dequeue_at = models.BigIntegerField(null=True, blank=True, editable=False)
    next_dequeue_at = models.BigIntegerField(null=True, blank=True, editable=False)
    turn = models.BigIntegerField(default=0, editable=False)
    released_total = models.BigIntegerField(
        default=0, editable=False, help_text="Messages released (leased) from this channel, ever."
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    weight = models.IntegerField(
        default=1, help_text=f"Messages released per round under backlog (1 to {MAX_WEIGHT})."
    )
    round_used = models.IntegerField(default=0, editable=False)
    # Token bucket (all three or none): at most rate_burst + rate_count * t / rate_period_ms
    # releases in any window of t ms. Set them through api.configure_channel(rate=...).
    rate_count = models.IntegerField(null=True, blank=True)
    rate_period_ms = models.BigIntegerField(null=True, blank=True)
    rate_burst = models.IntegerField(null=True, blank=True)
    bucket_level = models.BigIntegerField(null=True, blank=True, editable=False)
    next_token_at = models.BigIntegerField(null=True, blank=True, editable=False)
    # Plans: the plan the channel follows, and which limits are its own (a plan's change
    # leaves those alone). Set them through api.configure_channel(plan=..., inherit=...).
    plan = models.ForeignKey(
        Plan, null=True, blank=True, on_delete=models.PROTECT, related_name="channels", db_index=False
    )
    own_weight = models.BooleanField(default=False)
    own_max_concurrency = models.BooleanField(default=False)
    own_release_interval = models.BooleanField(default=False)
    own_rate = models.BooleanField(default=False)

    def delete(self, using: str | None = None, keep_parents: bool = False) -> tuple[int, dict[str, int]]:
        """Through ``lonnymq_delete_channel_v1`` (see :func:`_delete_channels`); raises
        :class:`ChannelNotDeleted` when the channel holds messages or is held now."""
        if self.pk is None:
            raise ValueError(f"{self} can't be deleted because its id is not set")
        deleted = _delete_channels([self.pk], using or router.db_for_write(Channel, instance=self))
        self.pk = None
        return deleted, {Channel._meta.label: deleted}

    delete.alters_data = True  # type: ignore[attr-defined]

    class Meta:
        db_table = "lonnymq_channel"
        ordering = ["queue", "name"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "name"], name="lonnymq_channel_queue_name_uniq"),
            models.CheckConstraint(
                condition=Q(queue__regex=_length(MAX_QUEUE_NAME)), name="lonnymq_channel_queue_length"
            ),
            models.CheckConstraint(
                condition=Q(name__regex=_length(MAX_CHANNEL_NAME)), name="lonnymq_channel_name_length"
            ),
            models.CheckConstraint(condition=Q(queue__regex=r"\S"), name="lonnymq_channel_queue_not_blank"),
            models.CheckConstraint(condition=Q(name__regex=r"\S"), name="lonnymq_channel_name_not_blank"),
            models.CheckConstraint(
                condition=Q(max_concurrency__isnull=True) | Q(max_concurrency__gt=0),
                name="lonnymq_channel_max_concurrency_positive",
                violation_error_message="Max concurrency must be positive, or empty for unlimited.",
            ),
            models.CheckConstraint(
                condition=Q(release_interval_ms__gte=0, release_interval_ms__lte=MAX_INTERVAL_MS),
                name="lonnymq_channel_release_interval_range",
                violation_error_message="Release interval must be between 0 and 366 days.",
            ),
            models.CheckConstraint(
                condition=Q(in_flight__gte=0), name="lonnymq_channel_in_flight_nonnegative"
            ),
            models.CheckConstraint(
                condition=Q(weight__gte=1, weight__lte=MAX_WEIGHT),
                name="lonnymq_channel_weight_range",
                violation_error_message=f"Weight must be between 1 and {MAX_WEIGHT}.",
            ),
            models.CheckConstraint(
                condition=Q(round_used__gte=0, round_used__lt=F("weight")),
                name="lonnymq_channel_round_used_range",
            ),
            models.CheckConstraint(
                condition=Q(rate_count__isnull=True, rate_period_ms__isnull=True, rate_burst__isnull=True)
                | Q(rate_count__isnull=False, rate_period_ms__isnull=False, rate_burst__isnull=False),
                name="lonnymq_channel_rate_complete",
                violation_error_message="A rate needs a count, a period and a burst, or none of them.",
            ),
            models.CheckConstraint(
                condition=Q(rate_count__gte=1, rate_count__lte=MAX_RATE_COUNT),
                name="lonnymq_channel_rate_count_range",
                violation_error_message="A rate's count must be between 1 and 1,000,000.",
            ),
            models.CheckConstraint(
                condition=Q(rate_period_ms__gte=1, rate_period_ms__lte=MAX_INTERVAL_MS),
                name="lonnymq_channel_rate_period_range",
                violation_error_message="A rate's period must be between 1 ms and 366 days.",
            ),
            models.CheckConstraint(
                condition=Q(rate_burst__gte=1, rate_burst__lte=MAX_RATE_BURST),
                name="lonnymq_channel_rate_burst_range",
                violation_error_message="A rate's burst must be between 1 and 1,000,000.",
            ),
            models.CheckConstraint(
                condition=Q(bucket_level__gte=0), name="lonnymq_channel_bucket_level_nonnegative"
            ),
        ]
        indexes = [
            models.Index(
                fields=["queue", "next_dequeue_at", "turn"],
                name="lonnymq_channel_eligible_idx",
                condition=Q(next_dequeue_at__isnull=False, paused=False)
                & (Q(max_concurrency__isnull=True) | Q(in_flight__lt=F("max_concurrency"))),
            ),
            models.Index(
                fields=["plan", "id"], name="lonnymq_channel_plan_idx", condition=Q(plan__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.name}"

    def limit_sources(self) -> list[tuple[str, str, str]]:
        """``(limit, value in effect, where it comes from)`` for each limit a plan can give:
        ``"own"`` (set on the channel), ``"plan <name>"`` or ``"default"``."""
        plan_source = f"plan {self.plan.name}" if self.plan_id is not None and self.plan else "default"
        rate = self.rate
        rows = [
            ("weight", str(self.weight), self.own_weight),
            (
                "max_concurrency",
                "unlimited" if self.max_concurrency is None else str(self.max_concurrency),
                self.own_max_concurrency,
            ),
            ("release_interval", f"{self.release_interval_ms} ms", self.own_release_interval),
            ("rate", "none" if rate is None else str(rate), self.own_rate),
        ]
        return [(limit, value, "own" if own else plan_source) for limit, value, own in rows]

    @property
    def rate(self):  # -> Rate | None
        from .rates import Rate

        return Rate.from_ms(self.rate_count, self.rate_period_ms, self.rate_burst)


class Message(models.Model):
    """A message waiting, scheduled, or in flight (leased by a worker)."""

    id = models.BigAutoField(primary_key=True)
    # No database constraint (migration 0036): the functions that write messages hold the
    # channel row themselves, and lonnymq_check_v2 reports a message whose channel is gone.
    channel = models.ForeignKey(
        Channel, on_delete=models.PROTECT, related_name="messages", db_index=False, db_constraint=False
    )
    payload = models.JSONField()
    dequeue_at = models.BigIntegerField(help_text="Not released before this time (ms since epoch).")
    priority = models.SmallIntegerField(default=0)
    attempts = models.IntegerField(default=0)
    max_attempts = models.IntegerField()
    lease_until = models.BigIntegerField(null=True, blank=True)
    lease_token = models.UUIDField(null=True, blank=True)
    leased_by = models.TextField(null=True, blank=True)
    slot_taken = models.BooleanField(default=False)
    dedup_key = models.CharField(max_length=MAX_DEDUP_KEY, null=True, blank=True)
    enqueued_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(null=True, blank=True)
    # Set by api.cancel() while the message runs; its worker stops the handler at its next heartbeat.
    cancel_requested = models.BooleanField(default=False)
    queue_slot = models.BooleanField(default=False, help_text="The lease took a slot of its queue's cap.")
    snoozes = models.IntegerField(default=0, help_text="Times a handler snoozed it (no attempt spent).")

    class Meta:
        db_table = "lonnymq_message"
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(attempts__gte=0), name="lonnymq_message_attempts_nonnegative"),
            models.CheckConstraint(condition=Q(snoozes__gte=0), name="lonnymq_message_snoozes_nonnegative"),
            models.CheckConstraint(
                condition=Q(dequeue_at__gte=0, dequeue_at__lte=MAX_EPOCH_MS),
                name="lonnymq_message_dequeue_at_range",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1, max_attempts__lte=MAX_ATTEMPTS),
                name="lonnymq_message_max_attempts_range",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=0, priority__lte=MAX_PRIORITY),
                name="lonnymq_message_priority_range",
            ),
            models.CheckConstraint(
                condition=Q(lease_until__isnull=True, lease_token__isnull=True)
                | Q(lease_until__isnull=False, lease_token__isnull=False),
                name="lonnymq_message_lease_complete",
            ),
            models.CheckConstraint(
                condition=Q(slot_taken=False) | Q(lease_until__isnull=False),
                name="lonnymq_message_slot_needs_lease",
            ),
            models.CheckConstraint(
                condition=Q(queue_slot=False) | Q(lease_until__isnull=False),
                name="lonnymq_message_queue_slot_needs_lease",
            ),
        ]
        indexes = [
            models.Index(
                fields=["channel", "dequeue_at", "id"],
                name="lonnymq_message_ready_idx",
                condition=Q(lease_until__isnull=True),
            ),
            models.Index(
                fields=["lease_until"],
                name="lonnymq_message_lease_idx",
                condition=Q(lease_until__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"message {self.id}"

    @property
    def state(self) -> str:
        """``in_flight``, ``paused`` (waiting in a paused channel), ``scheduled`` (not due yet)
        or ``ready``."""
        if self.lease_until is not None:
            return "in_flight"
        if self.channel.paused:
            return "paused"
        if self.dequeue_at > int(timezone.now().timestamp() * 1000):
            return "scheduled"
        return "ready"


class QueueConfig(models.Model):
    """Queue-wide limits (across all workers and channels of a queue): a concurrency cap, a
    token bucket, and the pause. A queue without a row has none, and pays nothing for them.
    Write it through :func:`django_lonnymq.api.configure_queue` and
    :func:`~django_lonnymq.api.pause_queue` (the admin does)."""

    queue = models.CharField(max_length=MAX_QUEUE_NAME, primary_key=True)
    max_concurrency = models.IntegerField(
        null=True, blank=True, help_text="Most messages of the queue in flight at once; empty: unlimited."
    )
    rate_count = models.IntegerField(null=True, blank=True)
    rate_period_ms = models.BigIntegerField(null=True, blank=True)
    rate_burst = models.IntegerField(null=True, blank=True)
    in_flight = models.IntegerField(default=0, editable=False, help_text="Leases that took a queue slot.")
    bucket_level = models.BigIntegerField(null=True, blank=True, editable=False)
    last_release_at = models.BigIntegerField(null=True, blank=True, editable=False)
    next_token_at = models.BigIntegerField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, editable=False)
    paused = models.BooleanField(default=False, help_text="A paused queue's workers take nothing from it.")

    class Meta:
        db_table = "lonnymq_queue_config"
        ordering = ["queue"]
        verbose_name = "queue limit"
        constraints = [
            models.CheckConstraint(
                condition=Q(queue__regex=_length(MAX_QUEUE_NAME)), name="lonnymq_queue_config_queue_length"
            ),
            models.CheckConstraint(
                condition=Q(queue__regex=r"\S"), name="lonnymq_queue_config_queue_not_blank"
            ),
            models.CheckConstraint(
                condition=Q(max_concurrency__isnull=True) | Q(max_concurrency__gt=0),
                name="lonnymq_queue_config_max_concurrency_positive",
            ),
            models.CheckConstraint(
                condition=Q(rate_count__isnull=True, rate_period_ms__isnull=True, rate_burst__isnull=True)
                | Q(rate_count__isnull=False, rate_period_ms__isnull=False, rate_burst__isnull=False),
                name="lonnymq_queue_config_rate_complete",
            ),
            models.CheckConstraint(
                condition=Q(rate_count__gte=1, rate_count__lte=MAX_RATE_COUNT),
                name="lonnymq_queue_config_rate_count_range",
            ),
            models.CheckConstraint(
                condition=Q(rate_period_ms__gte=1, rate_period_ms__lte=MAX_INTERVAL_MS),
                name="lonnymq_queue_config_rate_period_range",
            ),
            models.CheckConstraint(
                condition=Q(rate_burst__gte=1, rate_burst__lte=MAX_RATE_BURST),
                name="lonnymq_queue_config_rate_burst_range",
            ),
            models.CheckConstraint(
                condition=Q(max_concurrency__isnull=False) | Q(rate_count__isnull=False) | Q(paused=True),
                name="lonnymq_queue_config_has_a_limit",
            ),
            models.CheckConstraint(
                condition=Q(in_flight__gte=0), name="lonnymq_queue_config_in_flight_nonnegative"
            ),
            models.CheckConstraint(
                condition=Q(bucket_level__gte=0), name="lonnymq_queue_config_bucket_level_nonnegative"
            ),
        ]

    def __str__(self) -> str:
        return self.queue

    @property
    def rate(self):  # -> Rate | None
        from .rates import Rate

        return Rate.from_ms(self.rate_count, self.rate_period_ms, self.rate_burst)


class DeadMessage(models.Model):
    """A message that used up its attempts (failing or timing out), was discarded or cancelled,
    or whose last lease expired."""

    REASONS = [
        ("failed", "failed"),
        ("discarded", "discarded"),
        ("lease_expired", "lease expired"),
        ("timeout", "timed out"),
        ("cancelled", "cancelled"),
    ]

    id = models.BigIntegerField(primary_key=True)
    channel = models.ForeignKey(
        Channel, on_delete=models.SET_NULL, null=True, blank=True, related_name="dead_messages"
    )
    queue = models.CharField(max_length=MAX_QUEUE_NAME)
    channel_name = models.CharField(max_length=MAX_CHANNEL_NAME, db_column="channel")
    payload = models.JSONField()
    priority = models.SmallIntegerField(default=0)
    attempts = models.IntegerField()
    max_attempts = models.IntegerField()
    dedup_key = models.CharField(max_length=MAX_DEDUP_KEY, null=True, blank=True)
    enqueued_at = models.DateTimeField()
    died_at = models.DateTimeField(default=timezone.now)
    reason = models.CharField(max_length=20, choices=REASONS)
    last_error = models.TextField(null=True, blank=True)
    snoozes = models.IntegerField(default=0, help_text="Times a handler snoozed it (no attempt spent).")

    class Meta:
        db_table = "lonnymq_dead_message"
        ordering = ["-died_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(snoozes__gte=0), name="lonnymq_dead_message_snoozes_nonnegative"
            ),
            models.CheckConstraint(
                condition=Q(reason__in=["failed", "discarded", "lease_expired", "timeout", "cancelled"]),
                name="lonnymq_dead_message_reason_known",
            ),
        ]
        indexes = [
            models.Index(fields=["queue", "died_at"], name="lonnymq_dead_queue_died_idx"),
            # The admin's list: newest first, unfiltered or by reason; by queue and channel.
            models.Index(fields=["died_at"], name="lonnymq_dead_died_idx"),
            models.Index(fields=["queue", "channel_name", "died_at"], name="lonnymq_dead_queue_channel_idx"),
        ]

    def __str__(self) -> str:
        return f"dead message {self.id}"


class DedupKey(models.Model):
    """A dedup key still refusing duplicates (pruned after ``LONNYMQ_DEDUP_WINDOW``)."""

    pk = models.CompositePrimaryKey("channel_id", "dedup_key")
    channel_id = models.BigIntegerField()
    dedup_key = models.TextField()
    message_id = models.BigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "lonnymq_dedup"
        indexes = [models.Index(fields=["created_at"], name="lonnymq_dedup_created_idx")]


class TaskResultRecord(models.Model):
    """The stored result of a Django Task run on the queue (see :mod:`django_lonnymq.tasks`)."""

    STATUSES = [(s, s.lower()) for s in ("READY", "RUNNING", "FAILED", "SUCCESSFUL")]

    id = models.TextField(primary_key=True)
    backend = models.TextField()
    task_path = models.TextField()
    queue = models.TextField()
    channel = models.TextField()
    message_id = models.BigIntegerField(null=True, blank=True)
    status = models.TextField(choices=STATUSES)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    priority = models.IntegerField(default=0)
    run_after = models.DateTimeField(null=True, blank=True)
    return_value = models.JSONField(null=True, blank=True)
    errors = models.JSONField(default=list)
    worker_ids = models.JSONField(default=list)
    enqueued_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "lonnymq_task_result"
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["READY", "RUNNING", "FAILED", "SUCCESSFUL"]),
                name="lonnymq_task_result_status_known",
            ),
        ]
        indexes = [
            models.Index(
                fields=["finished_at"],
                name="lonnymq_task_finished_idx",
                condition=Q(finished_at__isnull=False),
            ),
            models.Index(fields=["message_id"], name="lonnymq_task_message_idx"),
        ]

    def __str__(self) -> str:
        return f"task result {self.id}"


# ---------------------------------------------------------------------------------------
# Queue samples (0003): the operators' figures and their history
# ---------------------------------------------------------------------------------------


class QueueSample(models.Model):
    """A queue's figures at one moment: live (unsaved, from :meth:`live`) or recorded history.

    Recorded by ``manage.py lonnymq_stats --record`` into the table of
    ``sql/schema.sql``; the dashboard charts the history. Counts are exact at
    ``at`` (see docs/admin.md for what each costs). ``released_total`` is a running count
    of releases, so the difference between two samples is the throughput between them.
    """

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=MAX_QUEUE_NAME)
    at = models.DateTimeField(default=timezone.now)
    channels = models.BigIntegerField()
    paused_channels = models.BigIntegerField()
    ready = models.BigIntegerField()
    scheduled = models.BigIntegerField()
    in_flight = models.BigIntegerField()
    dead = models.BigIntegerField()
    oldest_ready_ms = models.BigIntegerField(
        null=True, blank=True, help_text="How long the most overdue ready message had been due (ms)."
    )
    released_total = models.BigIntegerField(
        default=0,
        help_text="Messages released (leased) from the queue's channels, ever: the sum of their "
        "counters (once per delivery; drops only when a channel is deleted).",
    )
    paused = models.BigIntegerField(
        default=0, help_text="Messages waiting in paused channels (never counted as ready or scheduled)."
    )

    class Meta:
        db_table = "lonnymq_queue_sample"
        ordering = ["queue", "at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    channels__gte=0,
                    paused_channels__gte=0,
                    ready__gte=0,
                    scheduled__gte=0,
                    in_flight__gte=0,
                    dead__gte=0,
                    released_total__gte=0,
                ),
                name="lonnymq_queue_sample_counts_nonnegative",
            ),
            models.CheckConstraint(
                condition=Q(paused__gte=0), name="lonnymq_queue_sample_paused_nonnegative"
            ),
        ]
        indexes = [
            models.Index(fields=["queue", "at"], name="lonnymq_sample_queue_at_idx"),
            models.Index(fields=["at"], name="lonnymq_queue_sample_at_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.queue} at {self.at:%Y-%m-%d %H:%M:%S}"

    # Live figures (live(), record()) say whether a queue's counts were estimated: past
    # LONNYMQ_STATS_COUNT_CAP waiting messages (or dead letters) they come from a sample of the
    # table. Not stored: a recorded sample read back says False.
    estimated = False

    @property
    def depth(self) -> int:
        """Messages workers will take: ready plus scheduled (a paused channel's are apart)."""
        return self.ready + self.scheduled

    @property
    def backlog(self) -> int:
        """Messages not done: waiting (ready, scheduled, paused) plus in flight."""
        return self.ready + self.scheduled + self.paused + self.in_flight

    @property
    def oldest_ready_seconds(self) -> float | None:
        """How long the most overdue ready message had been due, in seconds (None: none ready)."""
        return None if self.oldest_ready_ms is None else self.oldest_ready_ms / 1000

    @classmethod
    def live(cls, queues: list[str] | None = None, *, using: str | None = None) -> list[QueueSample]:
        """The figures of every queue (or of ``queues``) now, as unsaved samples: exact up to
        ``LONNYMQ_STATS_COUNT_CAP`` waiting messages (and dead letters) per queue, estimated
        past it (``sample.estimated``)."""
        from . import db
        from .sampling import count_cap

        params = {"queues": queues, "cap": count_cap()}
        samples: list[QueueSample] = db.models(cls, "queue_stats", params, using=using)
        for sample in samples:
            sample._state.adding = True  # not stored: saving would insert it
        return samples

    @classmethod
    def record(cls, *, keep_ms: int = 86_400_000, using: str | None = None) -> list[QueueSample]:
        """Record a sample of every queue now; drop samples older than ``keep_ms``."""
        from . import db
        from .sampling import count_cap

        return db.models(cls, "record_samples", {"keep_ms": keep_ms, "cap": count_cap()}, using=using)


# ---------------------------------------------------------------------------------------
# Workers (0007): who is consuming, written by the workers' heartbeats
# ---------------------------------------------------------------------------------------


class Worker(models.Model):
    """A worker process as its last heartbeat described it (see :mod:`django_lonnymq.workers`).

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
        default=0, help_text="Messages it held at its last heartbeat (running or waiting for a thread)."
    )
    processed = models.BigIntegerField(default=0, help_text="Messages its handlers finished successfully.")
    failed = models.BigIntegerField(default=0, help_text="Messages its handlers failed (retried or dead).")

    class Meta:
        db_table = "lonnymq_worker"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(name__regex=_length(MAX_WORKER_NAME)), name="lonnymq_worker_name_length"
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
        from .conf import lost_after

        if self.stopped_at is not None:
            return "stopped"
        if self.heartbeat_at < timezone.now() - lost_after():
            return "lost"
        return "live"


# ---------------------------------------------------------------------------------------
# Topics (0009): consumer groups and unrouted events
# ---------------------------------------------------------------------------------------


class Subscription(models.Model):
    """``queue`` is a consumer group of ``topic``: every event published to the topic becomes
    one message in the queue (see :mod:`django_lonnymq.topics`)."""

    id = models.BigAutoField(primary_key=True)
    topic = models.CharField(max_length=MAX_TOPIC_NAME, help_text="The topic name events are published to.")
    queue = models.CharField(
        max_length=MAX_QUEUE_NAME,
        help_text="The queue (consumer group) that gets its own message for each event.",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        db_table = "lonnymq_subscription"
        ordering = ["topic", "queue"]
        constraints = [
            models.UniqueConstraint(fields=["topic", "queue"], name="lonnymq_subscription_topic_queue_uniq"),
            models.CheckConstraint(
                condition=Q(topic__regex=_length(MAX_TOPIC_NAME)), name="lonnymq_subscription_topic_length"
            ),
            models.CheckConstraint(
                condition=Q(topic__regex=r"\S"),
                name="lonnymq_subscription_topic_not_blank",
                violation_error_message="Topic must not be only blanks.",
            ),
            models.CheckConstraint(
                condition=Q(queue__regex=_length(MAX_QUEUE_NAME)), name="lonnymq_subscription_queue_length"
            ),
            models.CheckConstraint(
                condition=Q(queue__regex=r"\S"),
                name="lonnymq_subscription_queue_not_blank",
                violation_error_message="Queue must not be only blanks.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.topic} -> {self.queue}"


class Unrouted(models.Model):
    """Events published to ``topic`` while it had no subscriber (counted, not stored)."""

    topic = models.CharField(max_length=MAX_TOPIC_NAME, primary_key=True)
    events = models.BigIntegerField(default=0)
    last_published_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "lonnymq_unrouted"
        ordering = ["topic"]
        verbose_name = "unrouted topic"
        constraints = [
            models.CheckConstraint(
                condition=Q(topic__regex=_length(MAX_TOPIC_NAME)), name="lonnymq_unrouted_topic_length"
            ),
            models.CheckConstraint(condition=Q(events__gte=0), name="lonnymq_unrouted_events_nonnegative"),
        ]

    def __str__(self) -> str:
        return f"{self.topic}: {self.events} unrouted"


# ---------------------------------------------------------------------------------------
# Periodic schedules (0011): see django_lonnymq.schedules and docs/periodic.md
# ---------------------------------------------------------------------------------------


_now = timezone.now  # the Schedule model has a field named timezone


class Schedule(models.Model):
    """A periodic schedule: declared in code with ``@periodic`` or added in the admin.

    Workers serving ``queue`` enqueue each tick once (``next_tick_at``, ms since the epoch).
    A row inserted through the ORM (``objects.create()``, ``save()``, a fixture, a data
    migration's historical model) without a next tick gets its first tick from now at save time,
    and a timing that cannot be computed is refused then with :class:`InvalidArgument`.
    ``bulk_create()`` and raw SQL bypass that: give them ``next_tick_at``
    (:func:`django_lonnymq.schedules.first_tick`). Write timing changes through the admin or
    :mod:`django_lonnymq.schedules`, which compute the next tick; an ORM update of the timing
    alone leaves the old next tick in place.
    """

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(
        max_length=MAX_SCHEDULE_NAME, unique=True, help_text="Stable name of the schedule."
    )
    queue = models.CharField(max_length=MAX_QUEUE_NAME)
    channel = models.CharField(max_length=MAX_CHANNEL_NAME, default="default")
    cron = models.CharField(
        max_length=200,
        null=True,
        blank=True,
        help_text="Cron expression (five fields: minute hour day-of-month month day-of-week).",
    )
    every_ms = models.BigIntegerField(
        null=True, blank=True, help_text=f"Or a fixed interval in milliseconds (at least {MIN_EVERY_MS})."
    )
    timezone = models.CharField(
        max_length=100, default="UTC", help_text="IANA time zone of the cron expression."
    )
    payload = models.JSONField(default=dict, blank=True)
    catch_up = models.IntegerField(
        default=1, help_text="After downtime, enqueue at most this many missed ticks (the latest ones)."
    )
    max_attempts = models.IntegerField(null=True, blank=True, help_text="Empty: LONNYMQ_MAX_ATTEMPTS.")
    enabled = models.BooleanField(default=True)
    next_tick_at = models.BigIntegerField(null=True, blank=True, editable=False)
    last_tick_at = models.BigIntegerField(null=True, blank=True, editable=False)
    last_message_id = models.BigIntegerField(null=True, blank=True, editable=False)
    declared = models.JSONField(null=True, blank=True, editable=False)
    last_error = models.TextField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(default=_now, editable=False)

    class Meta:
        db_table = "lonnymq_schedule"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(cron__isnull=True, every_ms__isnull=False)
                | Q(cron__isnull=False, every_ms__isnull=True),
                name="lonnymq_schedule_one_timing",
                violation_error_message="Give a cron expression or an interval, not both.",
            ),
            models.CheckConstraint(
                condition=Q(every_ms__isnull=True)
                | Q(every_ms__gte=MIN_EVERY_MS, every_ms__lte=MAX_INTERVAL_MS),
                name="lonnymq_schedule_every_range",
                violation_error_message="The interval must be between 1 second and 366 days.",
            ),
            models.CheckConstraint(
                condition=Q(catch_up__gte=1, catch_up__lte=MAX_CATCH_UP),
                name="lonnymq_schedule_catch_up_range",
                violation_error_message=f"Catch up must be between 1 and {MAX_CATCH_UP}.",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__isnull=True)
                | Q(max_attempts__gte=1, max_attempts__lte=MAX_ATTEMPTS),
                name="lonnymq_schedule_max_attempts_range",
                violation_error_message=f"Max attempts must be between 1 and {MAX_ATTEMPTS}, or empty.",
            ),
        ]
        indexes = [
            models.Index(
                fields=["queue", "next_tick_at"], name="lonnymq_schedule_due_idx", condition=Q(enabled=True)
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def from_code(self) -> bool:
        """Declared with ``@periodic`` (synced by workers), not added in the database."""
        return self.declared is not None


# ---------------------------------------------------------------------------------------
# Workflows (0027): see django_lonnymq.workflows and docs/workflows.md
# ---------------------------------------------------------------------------------------


class WorkflowRecord(models.Model):
    """A started workflow (:class:`django_lonnymq.workflows.Workflow`): its state and counts."""

    STATES = ("running", "succeeded", "failed", "cancelled")

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=MAX_WORKFLOW_NAME)
    channel = models.CharField(
        max_length=MAX_CHANNEL_NAME, null=True, blank=True, help_text="The steps' default channel."
    )
    state = models.CharField(max_length=20, default="running")
    steps = models.IntegerField()
    remaining = models.IntegerField(help_text="Steps that have not succeeded.")
    dead = models.IntegerField(default=0, help_text="Steps dead now.")
    on_failure_queue = models.CharField(max_length=MAX_QUEUE_NAME, null=True, blank=True)
    on_failure_channel = models.CharField(max_length=MAX_CHANNEL_NAME, null=True, blank=True)
    on_failure_payload = models.JSONField(null=True, blank=True)
    on_failure_max_attempts = models.IntegerField(null=True, blank=True)
    on_failure_message_id = models.BigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "lonnymq_workflow"
        ordering = ["-id"]
        verbose_name = "workflow"

    def __str__(self) -> str:
        return f"workflow {self.id} {self.name} ({self.state})"


class WorkflowStepRecord(models.Model):
    """One step of a workflow; its id is the id of its message."""

    STATES = ("waiting", "queued", "succeeded", "dead", "cancelled")

    id = models.BigIntegerField(primary_key=True)
    workflow = models.ForeignKey(
        WorkflowRecord, on_delete=models.CASCADE, related_name="step_records", db_constraint=False
    )
    name = models.CharField(max_length=MAX_WORKFLOW_NAME)
    queue = models.CharField(max_length=MAX_QUEUE_NAME)
    channel = models.CharField(max_length=MAX_CHANNEL_NAME)
    payload = models.JSONField(null=True, blank=True)
    delay_ms = models.BigIntegerField(default=0)
    max_attempts = models.IntegerField()
    pending = models.IntegerField(help_text="Parents that have not succeeded.")
    state = models.CharField(max_length=20)
    output = models.JSONField(null=True, blank=True)
    releases = models.IntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    released_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    parents = ArrayField(models.BigIntegerField(), default=list, blank=True)  # ids of its parents, increasing
    children = ArrayField(
        models.BigIntegerField(), default=list, blank=True
    )  # ids of its children, increasing
    # Its output's size as stored (jsonb before compression), written by its ack.
    output_bytes = models.IntegerField(null=True, blank=True)

    class Meta:
        db_table = "lonnymq_workflow_step"
        ordering = ["id"]
        verbose_name = "workflow step"

    def __str__(self) -> str:
        return f"step {self.name} of workflow {self.workflow_id} ({self.state})"


class WorkflowEdgeRecord(models.Model):
    """An edge of a workflow's DAG: ``child`` waits for ``parent`` (parent id < child id).

    Read-only: a view of the steps' ``parents`` (its rows go with their steps')."""

    pk = models.CompositePrimaryKey("parent_id", "child_id")
    parent = models.ForeignKey(
        WorkflowStepRecord, on_delete=models.DO_NOTHING, related_name="child_edges", db_constraint=False
    )
    child = models.ForeignKey(
        WorkflowStepRecord, on_delete=models.DO_NOTHING, related_name="parent_edges", db_constraint=False
    )

    class Meta:
        db_table = "lonnymq_workflow_edge"
        verbose_name = "workflow edge"

    def __str__(self) -> str:
        return f"{self.parent_id} -> {self.child_id}"
