"""The last producers that took one shared advisory lock per channel (a requeue of dead
letters, run_now, a workflow start's root steps) take them per stripe past 64 channels, as
enqueue_many and a step's release do since 0040. From
sql/migrations/0041_stripes_everywhere.up.sql. The reverse reinstalls the three functions as
the migrations before left them.
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
            reverse_sql=PIN_SEARCH_PATH + sql.restore_previous("0041_stripes_everywhere", *REPLACED),
        ),
    ]
