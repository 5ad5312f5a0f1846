"""Weighted channels and token buckets (``lonnymq_configure_channel_v3``); from
sql/migrations/0010_weights_and_token_buckets.{up,down}.sql. The reverse reinstalls every
function as the migration before left it, then drops what this one added.
"""

from django.db import migrations, models
from django.db.models import Q

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

# Every function this migration replaces (its new one is dropped by the .down.sql file).
REPLACED = (
    "lonnymq_wake_v1", "lonnymq_mark_v1", "lonnymq_mark_many_v1", "lonnymq_apply_marks_v1",
    "lonnymq_dequeue_v1", "lonnymq_configure_channel_v2", "lonnymq_check_v1",
)  # fmt: skip


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0009_topics"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0010_weights_and_token_buckets"),
                    reverse_sql=PIN_SEARCH_PATH
                    + sql.restore_previous("0010_weights_and_token_buckets", *REPLACED)
                    + "\n"
                    + sql.migration("0010_weights_and_token_buckets", "down"),
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="channel",
                    name="weight",
                    field=models.IntegerField(
                        default=1, help_text="Messages released per round under backlog (1 to 1000)."
                    ),
                ),
                migrations.AddField(
                    model_name="channel",
                    name="round_used",
                    field=models.IntegerField(default=0, editable=False),
                ),
                migrations.AddField(
                    model_name="channel",
                    name="rate_count",
                    field=models.IntegerField(blank=True, null=True),
                ),
                migrations.AddField(
                    model_name="channel",
                    name="rate_period_ms",
                    field=models.BigIntegerField(blank=True, null=True),
                ),
                migrations.AddField(
                    model_name="channel",
                    name="rate_burst",
                    field=models.IntegerField(blank=True, null=True),
                ),
                migrations.AddField(
                    model_name="channel",
                    name="bucket_level",
                    field=models.BigIntegerField(blank=True, editable=False, null=True),
                ),
                migrations.AddField(
                    model_name="channel",
                    name="next_token_at",
                    field=models.BigIntegerField(blank=True, editable=False, null=True),
                ),
                migrations.AddConstraint(
                    model_name="channel",
                    constraint=models.CheckConstraint(
                        condition=Q(weight__gte=1, weight__lte=1000),
                        name="lonnymq_channel_weight_range",
                        violation_error_message="Weight must be between 1 and 1000.",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="channel",
                    constraint=models.CheckConstraint(
                        condition=Q(round_used__gte=0, round_used__lt=models.F("weight")),
                        name="lonnymq_channel_round_used_range",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="channel",
                    constraint=models.CheckConstraint(
                        condition=Q(
                            rate_count__isnull=True, rate_period_ms__isnull=True, rate_burst__isnull=True
                        )
                        | Q(rate_count__isnull=False, rate_period_ms__isnull=False, rate_burst__isnull=False),
                        name="lonnymq_channel_rate_complete",
                        violation_error_message="A rate needs a count, a period and a burst, or none of them.",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="channel",
                    constraint=models.CheckConstraint(
                        condition=Q(rate_count__gte=1, rate_count__lte=1_000_000),
                        name="lonnymq_channel_rate_count_range",
                        violation_error_message="A rate's count must be between 1 and 1,000,000.",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="channel",
                    constraint=models.CheckConstraint(
                        condition=Q(rate_period_ms__gte=1, rate_period_ms__lte=31_622_400_000),
                        name="lonnymq_channel_rate_period_range",
                        violation_error_message="A rate's period must be between 1 ms and 366 days.",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="channel",
                    constraint=models.CheckConstraint(
                        condition=Q(rate_burst__gte=1, rate_burst__lte=1_000_000),
                        name="lonnymq_channel_rate_burst_range",
                        violation_error_message="A rate's burst must be between 1 and 1,000,000.",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="channel",
                    constraint=models.CheckConstraint(
                        condition=Q(bucket_level__gte=0), name="lonnymq_channel_bucket_level_nonnegative"
                    ),
                ),
            ],
        ),
    ]
