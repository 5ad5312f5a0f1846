"""Pausing a whole queue (``lonnymq_queue_config.paused``, ``lonnymq_pause_queue_v1``): a paused
queue's dequeues release nothing, read on the queue row the dequeue already probes; from
sql/migrations/0023_pause_queue.{up,down}.sql. The reverse reinstalls the changed functions as
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

REPLACED = ("lonnymq_dequeue_v1", "lonnymq_next_due_v1", "lonnymq_configure_queue_v1")


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0022_cancel_message_cap"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0023_pause_queue"),
                    reverse_sql=PIN_SEARCH_PATH
                    + sql.restore_previous("0023_pause_queue", *REPLACED)
                    + "\n"
                    + sql.migration("0023_pause_queue", "down"),
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="queueconfig",
                    name="paused",
                    field=models.BooleanField(
                        default=False, help_text="A paused queue's workers take nothing from it."
                    ),
                ),
                migrations.RemoveConstraint(
                    model_name="queueconfig",
                    name="lonnymq_queue_config_has_a_limit",
                ),
                migrations.AddConstraint(
                    model_name="queueconfig",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            ("max_concurrency__isnull", False),
                            ("rate_count__isnull", False),
                            ("paused", True),
                            _connector="OR",
                        ),
                        name="lonnymq_queue_config_has_a_limit",
                    ),
                ),
            ],
        ),
    ]
