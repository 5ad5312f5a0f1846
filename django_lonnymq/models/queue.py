"""Queue-wide rows: the limits and pause of a queue (``QueueConfig``) and its figures, live or
recorded (``QueueSample``)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from .. import statements
from ..bounds import (
    MAX_INTERVAL_MS,
    MAX_QUEUE_NAME,
    MAX_RATE_BURST,
    MAX_RATE_COUNT,
)
from .common import length


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
    head_slots = models.IntegerField(
        default=1,
        editable=False,
        help_text="Slots of the first message the last release left out for want of slots.",
    )

    class Meta:
        db_table = "lonnymq_queue_config"
        ordering = ["queue"]
        verbose_name = "queue limit"
        constraints = [
            models.CheckConstraint(
                condition=Q(queue__regex=length(MAX_QUEUE_NAME)), name="lonnymq_queue_config_queue_length"
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
                condition=Q(head_slots__gte=1, head_slots__lte=1_000_000),
                name="lonnymq_queue_config_head_slots_range",
            ),
            models.CheckConstraint(
                condition=Q(bucket_level__gte=0), name="lonnymq_queue_config_bucket_level_nonnegative"
            ),
        ]

    def __str__(self) -> str:
        return self.queue

    @property
    def rate(self):  # -> Rate | None
        from ..rates import Rate

        return Rate.from_ms(self.rate_count, self.rate_period_ms, self.rate_burst)


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
        from ..sampling import count_cap

        params = {"queues": queues, "cap": count_cap()}
        samples: list[QueueSample] = statements.queue_stats(model=cls, **params, on=using)
        for sample in samples:
            sample._state.adding = True  # not stored: saving would insert it
        return samples

    @classmethod
    def record(cls, *, keep_ms: int = 86_400_000, using: str | None = None) -> list[QueueSample]:
        """Record a sample of every queue now; drop samples older than ``keep_ms``."""
        from ..sampling import count_cap

        return statements.record_samples(model=cls, keep_ms=keep_ms, cap=count_cap(), on=using)


# ---------------------------------------------------------------------------------------
