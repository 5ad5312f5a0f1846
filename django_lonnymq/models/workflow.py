"""Workflows, their steps and the DAG's edges: see :mod:`django_lonnymq.workflows` and
docs/workflows.md."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from ..bounds import (
    MAX_CHANNEL_NAME,
    MAX_QUEUE_NAME,
    MAX_WORKFLOW_NAME,
)

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
