"""message.progress(): the lonnymq_progress table and its write and prune functions. From
sql/migrations/0048_progress.up.sql; the reverse drops them.
"""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0047_stats_walk_in_index_order"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0048_progress"),
            reverse_sql=sql.migration("0048_progress", "down"),
        ),
    ]
