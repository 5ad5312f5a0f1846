"""Strict order per channel: ``configure_channel(ordered=True)``. ``lonnymq_channel.ordered``,
``hold_until`` and ``blocked_by``, ``lonnymq_order_channel_v1`` and
``lonnymq_unblock_channel_v1``, and the functions that hold and block an ordered channel; from
sql/migrations/0050_strict_order.{up,down}.sql. The reverse reinstalls the changed functions
as the migrations before left them, then drops what this one added.
"""

from django.db import migrations, models

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = (
    "lonnymq_wake_v1",
    "lonnymq_mark_v1",
    "lonnymq_mark_many_v1",
    "lonnymq_apply_marks_v1",
    "lonnymq_dequeue_v1",
    "lonnymq_unlease_v1",
    "lonnymq_bury_v1",
    "lonnymq_requeue_dead_v1",
    "lonnymq_check_v2",
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0049_costs"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0050_strict_order"),
                    reverse_sql=PIN_SEARCH_PATH
                    + sql.restore_previous("0050_strict_order", *REPLACED)
                    + "\n"
                    + sql.migration("0050_strict_order", "down"),
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="channel",
                    name="ordered",
                    field=models.BooleanField(
                        default=False, help_text="Strict order: one message at a time, in release order."
                    ),
                ),
                migrations.AddField(
                    model_name="channel",
                    name="hold_until",
                    field=models.BigIntegerField(
                        blank=True,
                        null=True,
                        help_text="An ordered channel releases nothing before this (ms).",
                    ),
                ),
                migrations.AddField(
                    model_name="channel",
                    name="blocked_by",
                    field=models.BigIntegerField(
                        blank=True, null=True, help_text="The dead message that blocks this ordered channel."
                    ),
                ),
                migrations.AddConstraint(
                    model_name="channel",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("ordered", False), ("max_concurrency", 1), _connector="OR"),
                        name="lonnymq_channel_ordered_one_at_a_time",
                        violation_error_message="An ordered channel runs one message at a time: max concurrency 1.",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="channel",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("hold_until__gte", 0), ("hold_until__lte", 253402300799999)),
                        name="lonnymq_channel_hold_range",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="channel",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("blocked_by__isnull", True), ("hold_until__isnull", False), _connector="OR"
                        ),
                        name="lonnymq_channel_blocked_is_held",
                    ),
                ),
                migrations.AddIndex(
                    model_name="channel",
                    index=models.Index(
                        condition=models.Q(("blocked_by__isnull", False)),
                        fields=["queue", "name"],
                        name="lonnymq_channel_blocked_idx",
                    ),
                ),
            ],
        ),
    ]
