"""Results of Django Tasks, from sql/migrations/0002_task_result.{up,down}.sql."""

import django.utils.timezone
from django.db import migrations, models

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0002_task_result"),
                    reverse_sql=sql.migration("0002_task_result", "down"),
                ),
            ],
            state_operations=[
                migrations.CreateModel(
                    name="TaskResultRecord",
                    fields=[
                        ("id", models.TextField(primary_key=True, serialize=False)),
                        ("backend", models.TextField()),
                        ("task_path", models.TextField()),
                        ("queue", models.TextField()),
                        ("channel", models.TextField()),
                        ("message_id", models.BigIntegerField(blank=True, null=True)),
                        (
                            "status",
                            models.TextField(
                                choices=[
                                    ("READY", "ready"),
                                    ("RUNNING", "running"),
                                    ("FAILED", "failed"),
                                    ("SUCCESSFUL", "successful"),
                                ]
                            ),
                        ),
                        ("args", models.JSONField(default=list)),
                        ("kwargs", models.JSONField(default=dict)),
                        ("priority", models.IntegerField(default=0)),
                        ("run_after", models.DateTimeField(blank=True, null=True)),
                        ("return_value", models.JSONField(blank=True, null=True)),
                        ("errors", models.JSONField(default=list)),
                        ("worker_ids", models.JSONField(default=list)),
                        ("enqueued_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("last_attempted_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        "db_table": "lonnymq_task_result",
                        "indexes": [
                            models.Index(
                                condition=models.Q(("finished_at__isnull", False)),
                                fields=["finished_at"],
                                name="lonnymq_task_finished_idx",
                            )
                        ],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("status__in", ["READY", "RUNNING", "FAILED", "SUCCESSFUL"])
                                ),
                                name="lonnymq_task_result_status_known",
                            )
                        ],
                    },
                ),
            ],
        ),
    ]
