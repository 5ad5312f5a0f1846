"""Messages waiting, scheduled or in flight, and the dedup keys still refusing duplicates."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..bounds import (
    MAX_ATTEMPTS,
    MAX_DEDUP_KEY,
    MAX_EPOCH_MS,
    MAX_PRIORITY,
)
from .channel import Channel


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
    cost = models.IntegerField(
        default=1, help_text="Tokens of its channel's and queue's rate limits its release takes."
    )
    slots = models.IntegerField(
        default=1, help_text="Units of its channel's and queue's concurrency caps its lease takes."
    )

    class Meta:
        db_table = "lonnymq_message"
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(attempts__gte=0), name="lonnymq_message_attempts_nonnegative"),
            models.CheckConstraint(condition=Q(snoozes__gte=0), name="lonnymq_message_snoozes_nonnegative"),
            models.CheckConstraint(
                condition=Q(cost__gte=1, cost__lte=1_000_000), name="lonnymq_message_cost_range"
            ),
            models.CheckConstraint(
                condition=Q(slots__gte=1, slots__lte=1_000_000), name="lonnymq_message_slots_range"
            ),
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
