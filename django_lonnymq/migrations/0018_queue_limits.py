"""Queue-wide limits (``lonnymq_queue_config``, ``lonnymq_configure_queue_v1``): a concurrency
cap and a token bucket across all workers and channels of a queue; leases that take a queue
slot are flagged (``lonnymq_message.queue_slot``) and give it back on ack, failure, release and
reap. From sql/migrations/0018_queue_limits.{up,down}.sql. The reverse reinstalls every
function as the migration before left it, then drops what this one added.
"""

import django.utils.timezone
from django.db import migrations, models

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

# Every function this migration replaces (its new ones are dropped by the .down.sql file).
REPLACED = (
    "lonnymq_dequeue_v1", "lonnymq_next_due_v1", "lonnymq_ack_v1", "lonnymq_bury_v1",
    "lonnymq_unlease_v1", "lonnymq_check_v1",
)  # fmt: skip


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0017_schedule_hardening"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0018_queue_limits"),
                    reverse_sql=PIN_SEARCH_PATH
                    + sql.restore_previous("0018_queue_limits", *REPLACED)
                    + "\n"
                    + sql.migration("0018_queue_limits", "down"),
                ),
            ],
            state_operations=[
                migrations.CreateModel(
                    name="QueueConfig",
                    fields=[
                        ("queue", models.CharField(max_length=100, primary_key=True, serialize=False)),
                        (
                            "max_concurrency",
                            models.IntegerField(
                                blank=True,
                                help_text="Most messages of the queue in flight at once; empty: unlimited.",
                                null=True,
                            ),
                        ),
                        ("rate_count", models.IntegerField(blank=True, null=True)),
                        ("rate_period_ms", models.BigIntegerField(blank=True, null=True)),
                        ("rate_burst", models.IntegerField(blank=True, null=True)),
                        (
                            "in_flight",
                            models.IntegerField(
                                default=0, editable=False, help_text="Leases that took a queue slot."
                            ),
                        ),
                        ("bucket_level", models.BigIntegerField(blank=True, editable=False, null=True)),
                        ("last_release_at", models.BigIntegerField(blank=True, editable=False, null=True)),
                        ("next_token_at", models.BigIntegerField(blank=True, editable=False, null=True)),
                        (
                            "updated_at",
                            models.DateTimeField(default=django.utils.timezone.now, editable=False),
                        ),
                    ],
                    options={
                        "verbose_name": "queue limit",
                        "db_table": "lonnymq_queue_config",
                        "ordering": ["queue"],
                    },
                ),
                migrations.AddField(
                    model_name="message",
                    name="queue_slot",
                    field=models.BooleanField(
                        default=False, help_text="The lease took a slot of its queue's cap."
                    ),
                ),
                migrations.AddConstraint(
                    model_name="message",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("queue_slot", False), ("lease_until__isnull", False), _connector="OR"
                        ),
                        name="lonnymq_message_queue_slot_needs_lease",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="queueconfig",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("queue__regex", "^.{1,100}$")),
                        name="lonnymq_queue_config_queue_length",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="queueconfig",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("queue__regex", "\\S")),
                        name="lonnymq_queue_config_queue_not_blank",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="queueconfig",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("max_concurrency__isnull", True), ("max_concurrency__gt", 0), _connector="OR"
                        ),
                        name="lonnymq_queue_config_max_concurrency_positive",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="queueconfig",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("rate_burst__isnull", True),
                                ("rate_count__isnull", True),
                                ("rate_period_ms__isnull", True),
                            ),
                            models.Q(
                                ("rate_burst__isnull", False),
                                ("rate_count__isnull", False),
                                ("rate_period_ms__isnull", False),
                            ),
                            _connector="OR",
                        ),
                        name="lonnymq_queue_config_rate_complete",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="queueconfig",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("rate_count__gte", 1), ("rate_count__lte", 1000000)),
                        name="lonnymq_queue_config_rate_count_range",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="queueconfig",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("rate_period_ms__gte", 1), ("rate_period_ms__lte", 31622400000)),
                        name="lonnymq_queue_config_rate_period_range",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="queueconfig",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("rate_burst__gte", 1), ("rate_burst__lte", 1000000)),
                        name="lonnymq_queue_config_rate_burst_range",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="queueconfig",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("max_concurrency__isnull", False), ("rate_count__isnull", False), _connector="OR"
                        ),
                        name="lonnymq_queue_config_has_a_limit",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="queueconfig",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("in_flight__gte", 0)),
                        name="lonnymq_queue_config_in_flight_nonnegative",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="queueconfig",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("bucket_level__gte", 0)),
                        name="lonnymq_queue_config_bucket_level_nonnegative",
                    ),
                ),
            ],
        ),
    ]
