"""The dead letters: messages that used up their attempts, were discarded or cancelled, or whose
last lease expired."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..bounds import (
    MAX_CHANNEL_NAME,
    MAX_DEDUP_KEY,
    MAX_QUEUE_NAME,
)
from .channel import Channel


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
    cost = models.IntegerField(
        default=1, help_text="Tokens of its channel's and queue's rate limits its release takes."
    )
    slots = models.IntegerField(
        default=1, help_text="Units of its channel's and queue's concurrency caps its lease takes."
    )

    class Meta:
        db_table = "lonnymq_dead_message"
        ordering = ["-died_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(snoozes__gte=0), name="lonnymq_dead_message_snoozes_nonnegative"
            ),
            models.CheckConstraint(
                condition=Q(cost__gte=1, cost__lte=1_000_000), name="lonnymq_dead_message_cost_range"
            ),
            models.CheckConstraint(
                condition=Q(slots__gte=1, slots__lte=1_000_000), name="lonnymq_dead_message_slots_range"
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
