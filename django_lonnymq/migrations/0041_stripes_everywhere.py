"""A transaction holds one shared advisory lock per channel for its first 64 channels and one
per stripe after that, whether it writes into them in one call or in thousands of enqueue()
calls; a requeue of dead letters, run_now and a workflow start's root steps lock that way too.
From sql/migrations/0041_stripes_everywhere.{up,down}.sql. The reverse reinstalls the seven
functions as the migrations before left them, then drops the new one.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = (
    "lonnymq_lock_channels_v1",
    "lonnymq_enqueue_v1",
    "lonnymq_enqueue_v2",
    "lonnymq_enqueue_task_keyed_v1",
    "lonnymq_requeue_dead_v1",
    "lonnymq_run_now_v1",
    "lonnymq_workflow_release_v1",
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0040_channel_stripes"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0041_stripes_everywhere"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0041_stripes_everywhere", *REPLACED)
            + "\n"
            + sql.migration("0041_stripes_everywhere", "down"),
        ),
    ]
