"""The stored results of Django Tasks run on the queue (:mod:`django_lonnymq.tasks`)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone


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
