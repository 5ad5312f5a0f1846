"""Channels that come and go: ``lonnymq_prune_channels_v1`` deletes idle, empty channels nobody
configured (``LONNYMQ_CHANNEL_IDLE_PRUNE``, run by the workers' housekeeping), folding their
releases into ``lonnymq_queue_released``; ``lonnymq_message_channel_idx`` makes a channel's
delete an index probe. From sql/migrations/0028_channel_prune.{up,down}.sql. The reverse
reinstalls ``lonnymq_queue_stats_v2`` as the migrations before left it, then drops what this
one added.
"""

from django.db import migrations, models

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_queue_stats_v2",)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0027_workflows"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0028_channel_prune"),
                    reverse_sql=PIN_SEARCH_PATH
                    + sql.restore_previous("0028_channel_prune", *REPLACED)
                    + "\n"
                    + sql.migration("0028_channel_prune", "down"),
                ),
            ],
            state_operations=[
                migrations.AddIndex(
                    model_name="message",
                    index=models.Index(fields=["channel"], name="lonnymq_message_channel_idx"),
                ),
            ],
        ),
    ]
