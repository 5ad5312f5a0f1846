"""Workers you can see: the lonnymq_worker table and its heartbeat functions, from
sql/migrations/0008_workers.{up,down}.sql (see django_lonnymq/workers.py).
"""

import django.contrib.postgres.fields
from django.db import migrations, models

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0007_paused_state"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0008_workers"),
                    reverse_sql=sql.migration("0008_workers", "down"),
                ),
            ],
            state_operations=[
                migrations.CreateModel(
                    name="Worker",
                    fields=[
                        ("name", models.CharField(max_length=200, primary_key=True, serialize=False)),
                        (
                            "instance",
                            models.UUIDField(
                                help_text="This run of the worker (a restart is a new instance)."
                            ),
                        ),
                        ("host", models.TextField()),
                        ("pid", models.IntegerField()),
                        (
                            "queues",
                            django.contrib.postgres.fields.ArrayField(
                                base_field=models.TextField(), size=None
                            ),
                        ),
                        ("concurrency", models.IntegerField()),
                        ("started_at", models.DateTimeField()),
                        ("heartbeat_at", models.DateTimeField()),
                        ("stopped_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "in_flight",
                            models.IntegerField(
                                default=0,
                                help_text="Messages it held at its last heartbeat (running or waiting for a thread).",
                            ),
                        ),
                        (
                            "processed",
                            models.BigIntegerField(
                                default=0, help_text="Messages its handlers finished successfully."
                            ),
                        ),
                        (
                            "failed",
                            models.BigIntegerField(
                                default=0, help_text="Messages its handlers failed (retried or dead)."
                            ),
                        ),
                    ],
                    options={
                        "db_table": "lonnymq_worker",
                        "ordering": ["name"],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("name__regex", "^.{1,200}$")),
                                name="lonnymq_worker_name_length",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("name__regex", "\\S")),
                                name="lonnymq_worker_name_not_blank",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("concurrency__gte", 1),
                                    ("failed__gte", 0),
                                    ("in_flight__gte", 0),
                                    ("processed__gte", 0),
                                ),
                                name="lonnymq_worker_counts_nonnegative",
                            ),
                        ],
                    },
                ),
            ],
        ),
    ]
