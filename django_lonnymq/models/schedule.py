"""Periodic schedules: see :mod:`django_lonnymq.schedules` and docs/periodic.md."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..bounds import (
    MAX_ATTEMPTS,
    MAX_CATCH_UP,
    MAX_CHANNEL_NAME,
    MAX_INTERVAL_MS,
    MAX_QUEUE_NAME,
    MAX_SCHEDULE_NAME,
)
from .common import MIN_EVERY_MS

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
