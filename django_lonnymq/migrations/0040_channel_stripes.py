"""Channel stripes: a producer writing into more than 64 channels at once holds one shared
advisory lock per stripe (a channel id modulo 1024) instead of one per channel, so a bulk
enqueue or a workflow's release takes at most 1,024 slots of the server's lock table; whoever
parks or deletes a channel tries both exclusive locks. From
sql/migrations/0040_channel_stripes.{up,down}.sql. The reverse reinstalls the five functions
as the migrations before left them, then drops the three new ones.
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
    "lonnymq_enqueue_many_v2",
    "lonnymq_workflow_release_v2",
    "lonnymq_dequeue_v1",
    "lonnymq_delete_channel_v1",
    "lonnymq_prune_channels_v1",
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0039_stable_plans_held"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0040_channel_stripes"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0040_channel_stripes", *REPLACED)
            + "\n"
            + sql.migration("0040_channel_stripes", "down"),
        ),
    ]
