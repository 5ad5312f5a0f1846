"""Cancelling a waiting workflow step (api.cancel) dead-letters it as 'cancelled', so its
workflow fails as it does for a running step; a requeue leaves the steps of a cancelled
workflow dead; check() reports a queued step whose message is gone. From
sql/migrations/0043_cancelled_steps.{up,down}.sql. The reverse reinstalls the two functions as
the migrations before left them, then drops the new one.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_requeue_dead_v1", "lonnymq_workflow_check_v1")


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0042_bounded_outputs"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0043_cancelled_steps"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0043_cancelled_steps", *REPLACED)
            + "\n"
            + sql.migration("0043_cancelled_steps", "down"),
        ),
    ]
