"""Plans: named sets of channel limits (pricing tiers), and the plan a queue's new channels follow."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..bounds import (
    MAX_INTERVAL_MS,
    MAX_PLAN_NAME,
    MAX_QUEUE_NAME,
    MAX_RATE_BURST,
    MAX_RATE_COUNT,
    MAX_WEIGHT,
)
from .common import length


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
    ordered = models.BooleanField(
        default=False,
        help_text="Strict order for the plan's channels: one message at a time, in release order.",
    )

    class Meta:
        db_table = "lonnymq_plan"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(name__regex=length(MAX_PLAN_NAME)), name="lonnymq_plan_name_length"
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
            models.CheckConstraint(
                condition=Q(ordered=False) | Q(max_concurrency__isnull=False, max_concurrency=1),
                name="lonnymq_plan_ordered_one_at_a_time",
                violation_error_message="An ordered plan runs one message at a time per channel: "
                "max concurrency 1.",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def rate(self):  # -> Rate | None
        from ..rates import Rate

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
                condition=Q(queue__regex=length(MAX_QUEUE_NAME)), name="lonnymq_queue_plan_queue_length"
            ),
            models.CheckConstraint(
                condition=Q(queue__regex=r"\S"), name="lonnymq_queue_plan_queue_not_blank"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue}: {self.plan_id}"
