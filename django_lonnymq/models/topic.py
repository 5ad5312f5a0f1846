"""Topics: consumer groups (subscriptions) and the count of events no group received."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..bounds import (
    MAX_QUEUE_NAME,
    MAX_TOPIC_NAME,
)
from .common import length

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
                condition=Q(topic__regex=length(MAX_TOPIC_NAME)), name="lonnymq_subscription_topic_length"
            ),
            models.CheckConstraint(
                condition=Q(topic__regex=r"\S"),
                name="lonnymq_subscription_topic_not_blank",
                violation_error_message="Topic must not be only blanks.",
            ),
            models.CheckConstraint(
                condition=Q(queue__regex=length(MAX_QUEUE_NAME)), name="lonnymq_subscription_queue_length"
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
                condition=Q(topic__regex=length(MAX_TOPIC_NAME)), name="lonnymq_unrouted_topic_length"
            ),
            models.CheckConstraint(condition=Q(events__gte=0), name="lonnymq_unrouted_events_nonnegative"),
        ]

    def __str__(self) -> str:
        return f"{self.topic}: {self.events} unrouted"


# ---------------------------------------------------------------------------------------
