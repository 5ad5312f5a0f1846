"""Strict order on plans: ``configure_plan(ordered=True)``. ``lonnymq_plan.ordered`` (an
ordered plan's cap is 1), ``lonnymq_channel.own_ordered``, ``lonnymq_configure_plan_v2``
(``lonnymq_configure_plan_v1`` stays installed for the previous release: superseded.sql), and
the functions that give a new or moved channel its plan's order; from
sql/migrations/0052_ordered_plans.{up,down}.sql. The reverse reinstalls the changed functions
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
    "lonnymq_channel_plan_v1",
    "lonnymq_order_channel_v1",
    "lonnymq_configure_channel_v4",
    "lonnymq_check_limits_v2",
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0051_publish_costs"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0052_ordered_plans"),
                    reverse_sql=PIN_SEARCH_PATH
                    + sql.restore_previous("0052_ordered_plans", *REPLACED)
                    + "\n"
                    + sql.migration("0052_ordered_plans", "down"),
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="plan",
                    name="ordered",
                    field=models.BooleanField(
                        default=False,
                        help_text="Strict order for the plan's channels: one message at a time, in release order.",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="plan",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("ordered", False),
                            models.Q(("max_concurrency", 1), ("max_concurrency__isnull", False)),
                            _connector="OR",
                        ),
                        name="lonnymq_plan_ordered_one_at_a_time",
                        violation_error_message="An ordered plan runs one message at a time per channel: "
                        "max concurrency 1.",
                    ),
                ),
                migrations.AddField(
                    model_name="channel",
                    name="own_ordered",
                    field=models.BooleanField(default=False),
                ),
            ],
        ),
    ]
