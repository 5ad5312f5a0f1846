"""Channels: a tenant's virtual queue inside a queue, with its limits and scheduler state; deleted
only through the SQL function that keeps the scheduler's invariants."""

from __future__ import annotations

from django.db import models, router, transaction
from django.db.models import F, Q
from django.db.models.functions import Least
from django.utils import timezone

from .. import statements
from ..bounds import (
    MAX_CHANNEL_NAME,
    MAX_EPOCH_MS,
    MAX_INTERVAL_MS,
    MAX_QUEUE_NAME,
    MAX_RATE_BURST,
    MAX_RATE_COUNT,
    MAX_SLOTS,
    MAX_WEIGHT,
)
from ..exceptions import ChannelNotDeleted
from .common import length
from .plan import Plan


def _delete_channels(ids: list[int], using: str) -> int:
    """Delete channels as ``api.delete_channel`` does, all or none (one transaction). Django's
    own delete looked for a channel's messages before it waited for the producers holding the
    channel (a message they committed meanwhile lost its channel), read the whole message table
    to do so (no index leads from a channel to its messages), and left the channel's wake-up
    marks behind."""
    deleted = 0
    with transaction.atomic(using=using):
        for channel_id in sorted(ids):
            outcome = statements.delete_channel(id=channel_id, on=using)
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


def at_cap(in_flight: int, head_slots: int, max_concurrency: int | None) -> bool:
    """No room for the slots its next message takes: the eligible index's predicate, negated
    (``in_flight + least(head_slots, max_concurrency) <= max_concurrency``, schema.sql)."""
    return max_concurrency is not None and in_flight + min(head_slots, max_concurrency) > max_concurrency


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
    ordered = models.BooleanField(
        default=False, help_text="Strict order: one message at a time, in release order."
    )
    hold_until = models.BigIntegerField(
        null=True, blank=True, help_text="An ordered channel releases nothing before this (ms)."
    )
    blocked_by = models.BigIntegerField(
        null=True, blank=True, help_text="The dead message that blocks this ordered channel."
    )
    head_slots = models.IntegerField(
        default=1, editable=False, help_text="Slots its next message takes, as the last release saw it."
    )
    # Whether ordered is the channel's own (configure_channel(ordered=...)) or its plan's.
    own_ordered = models.BooleanField(default=False)
    # The last message a dequeue took from it, where its candidate scans start while a held
    # snapshot fills the front of the ready index (schema.sql).
    taken_at = models.BigIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="The last message a dequeue took from it: its release time (ms) (candidate scans start after it under a held snapshot).",
    )
    taken_id = models.BigIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="The last message a dequeue took from it: its id (candidate scans start after it under a held snapshot).",
    )

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
        # The database holds the primary key and this unique (queue, name) in lonnymq_channel_key
        # since migration 0059 (a row written once: every dequeue rewrites this table's rows, and
        # a unique index here made each rewrite check every version a held snapshot keeps);
        # lonnymq_channel has plain indexes on them. The model keeps both, as what holds.
        constraints = [
            models.UniqueConstraint(fields=["queue", "name"], name="lonnymq_channel_queue_name_uniq"),
            models.CheckConstraint(
                condition=Q(queue__regex=length(MAX_QUEUE_NAME)), name="lonnymq_channel_queue_length"
            ),
            models.CheckConstraint(
                condition=Q(name__regex=length(MAX_CHANNEL_NAME)), name="lonnymq_channel_name_length"
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
            models.CheckConstraint(
                condition=Q(ordered=False) | Q(max_concurrency=1),
                name="lonnymq_channel_ordered_one_at_a_time",
                violation_error_message="An ordered channel runs one message at a time: max concurrency 1.",
            ),
            models.CheckConstraint(
                condition=Q(hold_until__gte=0, hold_until__lte=MAX_EPOCH_MS),
                name="lonnymq_channel_hold_range",
            ),
            models.CheckConstraint(
                condition=Q(blocked_by__isnull=True) | Q(hold_until__isnull=False),
                name="lonnymq_channel_blocked_is_held",
            ),
            models.CheckConstraint(
                condition=Q(head_slots__gte=1, head_slots__lte=MAX_SLOTS),
                name="lonnymq_channel_head_slots_range",
            ),
        ]
        indexes = [
            models.Index(
                fields=["queue", "next_dequeue_at", "turn"],
                name="lonnymq_channel_eligible_idx",
                condition=Q(next_dequeue_at__isnull=False, paused=False)
                & (
                    Q(max_concurrency__isnull=True)
                    | Q(max_concurrency__gte=F("in_flight") + Least("head_slots", "max_concurrency"))
                ),
            ),
            models.Index(
                fields=["plan", "id"], name="lonnymq_channel_plan_idx", condition=Q(plan__isnull=False)
            ),
            models.Index(
                fields=["queue", "name"],
                name="lonnymq_channel_blocked_idx",
                condition=Q(blocked_by__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.name}"

    def limit_sources(self) -> list[tuple[str, str, str]]:
        """``(limit, value in effect, where it comes from)`` for each limit a plan can give (and
        strict order):
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
            ("ordered", "yes" if self.ordered else "no", self.own_ordered),
        ]
        return [(limit, value, "own" if own else plan_source) for limit, value, own in rows]

    @property
    def rate(self):  # -> Rate | None
        from ..rates import Rate

        return Rate.from_ms(self.rate_count, self.rate_period_ms, self.rate_burst)
