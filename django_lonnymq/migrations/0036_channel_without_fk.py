"""No foreign key from a message to its channel, and no ``lonnymq_message_channel_idx``: the
index served only the key's check on a channel's delete, and every insert and lease paid for
it. Every function that writes a new message holds its channel row itself
(``lonnymq_hold_channels_v1``: the key's check and lock), prune and ``delete_channel`` test
emptiness through the ready and lease indexes, and ``lonnymq_check_v2`` reports orphaned
messages. From sql/migrations/0036_channel_without_fk.{up,down}.sql. The reverse reinstalls
the twelve functions as the migrations before left them, then puts the key and its index back.
"""

import django.db.models.deletion
from django.db import migrations, models

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = (
    "lonnymq_enqueue_v1",
    "lonnymq_enqueue_v2",
    "lonnymq_enqueue_many_v1",
    "lonnymq_enqueue_many_v2",
    "lonnymq_enqueue_task_keyed_v1",
    "lonnymq_requeue_dead_v1",
    "lonnymq_purge_channel_v1",
    "lonnymq_workflow_release_v1",
    "lonnymq_workflow_release_v2",
    "lonnymq_delete_channel_v1",
    "lonnymq_prune_channels_v1",
    "lonnymq_check_v2",
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0035_stats_at_size"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0036_channel_without_fk"),
                    reverse_sql=PIN_SEARCH_PATH
                    + sql.restore_previous("0036_channel_without_fk", *REPLACED)
                    + "\n"
                    + sql.migration("0036_channel_without_fk", "down"),
                ),
            ],
            state_operations=[
                migrations.RemoveIndex(model_name="message", name="lonnymq_message_channel_idx"),
                migrations.AlterField(
                    model_name="message",
                    name="channel",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="messages",
                        to="django_lonnymq.channel",
                    ),
                ),
            ],
        ),
    ]
