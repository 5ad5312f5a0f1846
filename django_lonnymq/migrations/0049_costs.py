"""Costs: ``enqueue(cost=k)`` takes k tokens of the channel's and the queue's token buckets.
``lonnymq_message.cost`` and ``lonnymq_dead_message.cost``, the enqueues that take it
(``lonnymq_enqueue_v3``, ``_many_v3``, ``_keyed_v2``) and the functions that carry or spend it;
from sql/migrations/0049_costs.{up,down}.sql. The reverse reinstalls the changed functions as
the migrations before left them, then drops what this one added.
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
    "lonnymq_dequeue_v1",
    "lonnymq_bury_v1",
    "lonnymq_requeue_dead_v1",
    "lonnymq_enqueue_task_v1",
    "lonnymq_enqueue_task_keyed_v1",
    "lonnymq_fire_schedule_v1",
    "lonnymq_publish_v2",
    "lonnymq_workflow_step_dead_v1",
)

COST_HELP = "Tokens of its channel's and queue's rate limits its release takes."


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0048_progress"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0049_costs"),
                    reverse_sql=PIN_SEARCH_PATH
                    + sql.restore_previous("0049_costs", *REPLACED)
                    + "\n"
                    + sql.migration("0049_costs", "down"),
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="message",
                    name="cost",
                    field=models.IntegerField(default=1, help_text=COST_HELP),
                ),
                migrations.AddConstraint(
                    model_name="message",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("cost__gte", 1), ("cost__lte", 1000000)),
                        name="lonnymq_message_cost_range",
                    ),
                ),
                migrations.AddField(
                    model_name="deadmessage",
                    name="cost",
                    field=models.IntegerField(default=1, help_text=COST_HELP),
                ),
                migrations.AddConstraint(
                    model_name="deadmessage",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("cost__gte", 1), ("cost__lte", 1000000)),
                        name="lonnymq_dead_message_cost_range",
                    ),
                ),
            ],
        ),
    ]
