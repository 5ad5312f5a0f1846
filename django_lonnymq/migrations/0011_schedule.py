"""Periodic schedules: the ``lonnymq_schedule`` table and the functions that fire and sync
them, from sql/migrations/0011_schedule.{up,down}.sql (see docs/periodic.md).
"""

import django.utils.timezone
from django.db import migrations, models

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0010_weights_and_token_buckets"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0011_schedule"),
                    reverse_sql=sql.migration("0011_schedule", "down"),
                ),
            ],
            state_operations=[
                migrations.CreateModel(
                    name="Schedule",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        (
                            "name",
                            models.CharField(
                                help_text="Stable name of the schedule.", max_length=200, unique=True
                            ),
                        ),
                        ("queue", models.CharField(max_length=100)),
                        ("channel", models.CharField(default="default", max_length=200)),
                        (
                            "cron",
                            models.CharField(
                                blank=True,
                                help_text="Cron expression (five fields: minute hour day-of-month month day-of-week).",
                                max_length=200,
                                null=True,
                            ),
                        ),
                        (
                            "every_ms",
                            models.BigIntegerField(
                                blank=True,
                                help_text="Or a fixed interval in milliseconds (at least 1000).",
                                null=True,
                            ),
                        ),
                        (
                            "timezone",
                            models.CharField(
                                default="UTC",
                                help_text="IANA time zone of the cron expression.",
                                max_length=100,
                            ),
                        ),
                        ("payload", models.JSONField(blank=True, default=dict)),
                        (
                            "catch_up",
                            models.IntegerField(
                                default=1,
                                help_text="After downtime, enqueue at most this many missed ticks (the latest ones).",
                            ),
                        ),
                        (
                            "max_attempts",
                            models.IntegerField(
                                blank=True, help_text="Empty: LONNYMQ_MAX_ATTEMPTS.", null=True
                            ),
                        ),
                        ("enabled", models.BooleanField(default=True)),
                        ("next_tick_at", models.BigIntegerField(blank=True, editable=False, null=True)),
                        ("last_tick_at", models.BigIntegerField(blank=True, editable=False, null=True)),
                        ("last_message_id", models.BigIntegerField(blank=True, editable=False, null=True)),
                        ("declared", models.JSONField(blank=True, editable=False, null=True)),
                        ("last_error", models.TextField(blank=True, editable=False, null=True)),
                        (
                            "created_at",
                            models.DateTimeField(default=django.utils.timezone.now, editable=False),
                        ),
                    ],
                    options={
                        "db_table": "lonnymq_schedule",
                        "ordering": ["name"],
                        "indexes": [
                            models.Index(
                                condition=models.Q(("enabled", True)),
                                fields=["queue", "next_tick_at"],
                                name="lonnymq_schedule_due_idx",
                            )
                        ],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(
                                    models.Q(("cron__isnull", True), ("every_ms__isnull", False)),
                                    models.Q(("cron__isnull", False), ("every_ms__isnull", True)),
                                    _connector="OR",
                                ),
                                name="lonnymq_schedule_one_timing",
                                violation_error_message="Give a cron expression or an interval, not both.",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("every_ms__isnull", True),
                                    models.Q(("every_ms__gte", 1000), ("every_ms__lte", 31622400000)),
                                    _connector="OR",
                                ),
                                name="lonnymq_schedule_every_range",
                                violation_error_message="The interval must be between 1 second and 366 days.",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("catch_up__gte", 1), ("catch_up__lte", 1000)),
                                name="lonnymq_schedule_catch_up_range",
                                violation_error_message="Catch up must be between 1 and 1000.",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("max_attempts__isnull", True),
                                    models.Q(("max_attempts__gte", 1), ("max_attempts__lte", 1000)),
                                    _connector="OR",
                                ),
                                name="lonnymq_schedule_max_attempts_range",
                                violation_error_message="Max attempts must be between 1 and 1000, or empty.",
                            ),
                        ],
                    },
                ),
            ],
        ),
    ]
