"""A busy channel is served by several dequeuers at once: a dequeue that finds every due
channel held leases messages of those without limits without their rows
(``lonnymq_dequeue_held_v1``), counted in ``lonnymq_release_count``; from
sql/migrations/0015_dequeue_held_channels.{up,down}.sql. ``lonnymq_dequeue_v1`` keeps its
name, arguments and result. The reverse folds the counts into ``released_total``, drops what
this one added and reinstalls the replaced functions as the migrations before left them.
"""

from django.db import migrations

from django_lonnymq import sql

REPLACED = (
    "lonnymq_dequeue_v1",
    "lonnymq_reap_v1",
    "lonnymq_configure_channel_v3",
    "lonnymq_delete_channel_v1",
    "lonnymq_queue_stats_v1",
    "lonnymq_queue_stats_v2",
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0014_running_control"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0015_dequeue_held_channels"),
            # The .down.sql sets the search_path the reinstalled bodies pin, then drops.
            reverse_sql=sql.migration("0015_dequeue_held_channels", "down")
            + "\n"
            + sql.restore_previous("0015_dequeue_held_channels", *REPLACED),
        ),
    ]
