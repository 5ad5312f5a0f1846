"""lonnymq_queue_stats_v3 walks each channel in index order (no bitmap scan, no sort), so its
work stays bounded by the cap whatever the plan. From
sql/migrations/0047_stats_walk_in_index_order.up.sql; the reverse resets the two settings.
"""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0046_consume"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0047_stats_walk_in_index_order"),
            reverse_sql=sql.migration("0047_stats_walk_in_index_order", "down"),
        ),
    ]
