"""Workflows: lonnymq_workflow, lonnymq_workflow_step, lonnymq_workflow_edge, their functions
and the two triggers on lonnymq_dead_message (step messages only), from
sql/migrations/0027_workflows.{up,down}.sql. No existing function changes.
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0026_plans"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0027_workflows"),
                    reverse_sql=sql.migration("0027_workflows", "down"),
                ),
            ],
            state_operations=[
                migrations.CreateModel(
                    name="WorkflowRecord",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("name", models.CharField(max_length=200)),
                        (
                            "channel",
                            models.CharField(
                                blank=True, help_text="The steps' default channel.", max_length=200, null=True
                            ),
                        ),
                        ("state", models.CharField(default="running", max_length=20)),
                        ("steps", models.IntegerField()),
                        ("remaining", models.IntegerField(help_text="Steps that have not succeeded.")),
                        ("dead", models.IntegerField(default=0, help_text="Steps dead now.")),
                        ("on_failure_queue", models.CharField(blank=True, max_length=100, null=True)),
                        ("on_failure_channel", models.CharField(blank=True, max_length=200, null=True)),
                        ("on_failure_payload", models.JSONField(blank=True, null=True)),
                        ("on_failure_max_attempts", models.IntegerField(blank=True, null=True)),
                        ("on_failure_message_id", models.BigIntegerField(blank=True, null=True)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        "verbose_name": "workflow",
                        "db_table": "lonnymq_workflow",
                        "ordering": ["-id"],
                    },
                ),
                migrations.CreateModel(
                    name="WorkflowStepRecord",
                    fields=[
                        ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                        ("name", models.CharField(max_length=200)),
                        ("queue", models.CharField(max_length=100)),
                        ("channel", models.CharField(max_length=200)),
                        ("payload", models.JSONField(blank=True, null=True)),
                        ("delay_ms", models.BigIntegerField(default=0)),
                        ("max_attempts", models.IntegerField()),
                        ("pending", models.IntegerField(help_text="Parents that have not succeeded.")),
                        ("state", models.CharField(max_length=20)),
                        ("output", models.JSONField(blank=True, null=True)),
                        ("releases", models.IntegerField(default=0)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("released_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "workflow",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="step_records",
                                to="django_lonnymq.workflowrecord",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "workflow step",
                        "db_table": "lonnymq_workflow_step",
                        "ordering": ["id"],
                    },
                ),
                migrations.CreateModel(
                    name="WorkflowEdgeRecord",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "parent_id",
                                "child_id",
                                blank=True,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        (
                            "child",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="parent_edges",
                                to="django_lonnymq.workflowsteprecord",
                            ),
                        ),
                        (
                            "parent",
                            models.ForeignKey(
                                db_constraint=False,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="child_edges",
                                to="django_lonnymq.workflowsteprecord",
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "workflow edge",
                        "db_table": "lonnymq_workflow_edge",
                    },
                ),
            ],
        ),
    ]
