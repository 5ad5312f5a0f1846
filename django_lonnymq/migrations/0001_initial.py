"""Tables, indexes and the v1 SQL functions, from sql/migrations/0001_initial.{up,down}.sql
(frozen; the live definitions are in sql/schema.sql).

The database side is the SQL file; the state operations tell Django what the models look
like, so ``makemigrations --check`` stays clean.
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

from django_lonnymq import sql


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0001_initial"),
                    reverse_sql=sql.migration("0001_initial", "down"),
                ),
            ],
            state_operations=[
                migrations.CreateModel(
                    name="Channel",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("queue", models.CharField(max_length=100)),
                        ("name", models.CharField(max_length=200)),
                        (
                            "max_concurrency",
                            models.IntegerField(
                                blank=True,
                                help_text="Most messages of this channel in flight at once; empty means unlimited.",
                                null=True,
                            ),
                        ),
                        (
                            "release_interval_ms",
                            models.BigIntegerField(
                                default=0,
                                help_text="Rate limit: least time between two releases, in milliseconds (0: none).",
                            ),
                        ),
                        (
                            "paused",
                            models.BooleanField(
                                default=False, help_text="A paused channel releases nothing."
                            ),
                        ),
                        (
                            "in_flight",
                            models.IntegerField(
                                default=0, editable=False, help_text="Leases that took a concurrency slot."
                            ),
                        ),
                        ("last_dequeue_at", models.BigIntegerField(blank=True, editable=False, null=True)),
                        ("next_dequeue_at", models.BigIntegerField(blank=True, editable=False, null=True)),
                        ("turn", models.BigIntegerField(default=0, editable=False)),
                        (
                            "released_total",
                            models.BigIntegerField(
                                default=0,
                                editable=False,
                                help_text="Messages released (leased) from this channel, ever.",
                            ),
                        ),
                        (
                            "created_at",
                            models.DateTimeField(default=django.utils.timezone.now, editable=False),
                        ),
                    ],
                    options={
                        "db_table": "lonnymq_channel",
                        "ordering": ["queue", "name"],
                        "indexes": [
                            models.Index(
                                condition=models.Q(
                                    ("next_dequeue_at__isnull", False),
                                    ("paused", False),
                                    models.Q(
                                        ("max_concurrency__isnull", True),
                                        ("in_flight__lt", models.F("max_concurrency")),
                                        _connector="OR",
                                    ),
                                ),
                                fields=["queue", "next_dequeue_at", "turn"],
                                name="lonnymq_channel_eligible_idx",
                            )
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("queue", "name"), name="lonnymq_channel_queue_name_uniq"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("queue__regex", "^.{1,100}$")),
                                name="lonnymq_channel_queue_length",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("name__regex", "^.{1,200}$")),
                                name="lonnymq_channel_name_length",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("max_concurrency__isnull", True),
                                    ("max_concurrency__gt", 0),
                                    _connector="OR",
                                ),
                                name="lonnymq_channel_max_concurrency_positive",
                                violation_error_message="Max concurrency must be positive, or empty for unlimited.",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("release_interval_ms__gte", 0)),
                                name="lonnymq_channel_release_interval_nonnegative",
                                violation_error_message="Release interval must not be negative.",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("in_flight__gte", 0)),
                                name="lonnymq_channel_in_flight_nonnegative",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="DedupKey",
                    fields=[
                        (
                            "pk",
                            models.CompositePrimaryKey(
                                "channel_id",
                                "dedup_key",
                                blank=True,
                                editable=False,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("channel_id", models.BigIntegerField()),
                        ("dedup_key", models.TextField()),
                        ("message_id", models.BigIntegerField()),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                    ],
                    options={
                        "db_table": "lonnymq_dedup",
                        "indexes": [models.Index(fields=["created_at"], name="lonnymq_dedup_created_idx")],
                    },
                ),
                migrations.CreateModel(
                    name="DeadMessage",
                    fields=[
                        ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                        ("queue", models.CharField(max_length=100)),
                        ("channel_name", models.CharField(db_column="channel", max_length=200)),
                        ("payload", models.JSONField()),
                        ("priority", models.SmallIntegerField(default=0)),
                        ("attempts", models.IntegerField()),
                        ("max_attempts", models.IntegerField()),
                        ("dedup_key", models.CharField(blank=True, max_length=200, null=True)),
                        ("enqueued_at", models.DateTimeField()),
                        ("died_at", models.DateTimeField(default=django.utils.timezone.now)),
                        (
                            "reason",
                            models.CharField(
                                choices=[
                                    ("failed", "failed"),
                                    ("discarded", "discarded"),
                                    ("lease_expired", "lease expired"),
                                ],
                                max_length=20,
                            ),
                        ),
                        ("last_error", models.TextField(blank=True, null=True)),
                        (
                            "channel",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="dead_messages",
                                to="django_lonnymq.channel",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "lonnymq_dead_message",
                        "ordering": ["-died_at"],
                        "indexes": [
                            models.Index(fields=["queue", "died_at"], name="lonnymq_dead_queue_died_idx")
                        ],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("reason__in", ["failed", "discarded", "lease_expired"])),
                                name="lonnymq_dead_message_reason_known",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Message",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("payload", models.JSONField()),
                        (
                            "dequeue_at",
                            models.BigIntegerField(
                                help_text="Not released before this time (ms since epoch)."
                            ),
                        ),
                        ("priority", models.SmallIntegerField(default=0)),
                        ("attempts", models.IntegerField(default=0)),
                        ("max_attempts", models.IntegerField()),
                        ("lease_until", models.BigIntegerField(blank=True, null=True)),
                        ("lease_token", models.UUIDField(blank=True, null=True)),
                        ("leased_by", models.TextField(blank=True, null=True)),
                        ("slot_taken", models.BooleanField(default=False)),
                        ("dedup_key", models.CharField(blank=True, max_length=200, null=True)),
                        ("enqueued_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("last_error", models.TextField(blank=True, null=True)),
                        (
                            "channel",
                            models.ForeignKey(
                                db_index=False,
                                on_delete=django.db.models.deletion.PROTECT,
                                related_name="messages",
                                to="django_lonnymq.channel",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "lonnymq_message",
                        "ordering": ["id"],
                        "indexes": [
                            models.Index(
                                condition=models.Q(("lease_until__isnull", True)),
                                fields=["channel", "dequeue_at", "id"],
                                name="lonnymq_message_ready_idx",
                            ),
                            models.Index(
                                condition=models.Q(("lease_until__isnull", False)),
                                fields=["lease_until"],
                                name="lonnymq_message_lease_idx",
                            ),
                        ],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("attempts__gte", 0)),
                                name="lonnymq_message_attempts_nonnegative",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("max_attempts__gte", 1), ("max_attempts__lte", 1000)),
                                name="lonnymq_message_max_attempts_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("priority__gte", 0), ("priority__lte", 100)),
                                name="lonnymq_message_priority_range",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    models.Q(("lease_token__isnull", True), ("lease_until__isnull", True)),
                                    models.Q(("lease_token__isnull", False), ("lease_until__isnull", False)),
                                    _connector="OR",
                                ),
                                name="lonnymq_message_lease_complete",
                            ),
                            models.CheckConstraint(
                                condition=models.Q(
                                    ("slot_taken", False), ("lease_until__isnull", False), _connector="OR"
                                ),
                                name="lonnymq_message_slot_needs_lease",
                            ),
                        ],
                    },
                ),
            ],
        ),
    ]
