"""The queue-sample history table and the operators' SQL functions, from
sql/migrations/0003_queue_sample.{up,down}.sql (see docs/admin.md).

The database side is the SQL file; the state operations tell Django what the model looks
like, so ``makemigrations --check`` stays clean.
"""

import django.utils.timezone
from django.db import migrations, models

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0002_task_result"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0003_queue_sample"),
                    reverse_sql=sql.migration("0003_queue_sample", "down"),
                ),
            ],
            state_operations=[
                migrations.CreateModel(
                    name="QueueSample",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("queue", models.CharField(max_length=100)),
                        ("at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("channels", models.BigIntegerField()),
                        ("paused_channels", models.BigIntegerField()),
                        ("ready", models.BigIntegerField()),
                        ("scheduled", models.BigIntegerField()),
                        ("in_flight", models.BigIntegerField()),
                        ("dead", models.BigIntegerField()),
                        (
                            "oldest_ready_ms",
                            models.BigIntegerField(
                                blank=True,
                                help_text="How long the most overdue ready message had been due (ms).",
                                null=True,
                            ),
                        ),
                        (
                            "released_total",
                            models.BigIntegerField(
                                default=0,
                                help_text="Messages released (leased) from the queue's channels, ever: the sum of "
                                "their counters (once per delivery; drops only when a channel is deleted).",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "lonnymq_queue_sample",
                        "ordering": ["queue", "at"],
                        "indexes": [
                            models.Index(fields=["queue", "at"], name="lonnymq_sample_queue_at_idx"),
                            models.Index(fields=["at"], name="lonnymq_queue_sample_at_idx"),
                        ],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("channels__gte", 0),
                                    ("dead__gte", 0),
                                    ("in_flight__gte", 0),
                                    ("paused_channels__gte", 0),
                                    ("ready__gte", 0),
                                    ("released_total__gte", 0),
                                    ("scheduled__gte", 0),
                                ),
                                name="lonnymq_queue_sample_counts_nonnegative",
                            ),
                        ],
                    },
                ),
            ],
        ),
    ]
