"""Dedup modes: ``on_duplicate`` "skip", "replace" (debounce) or "update" (throttle) for a
repeated dedup key (``lonnymq_enqueue_keyed_v1``, and ``lonnymq_enqueue_v2``,
``lonnymq_enqueue_many_v2``, ``lonnymq_publish_v2`` beside their v1 forms); from
sql/migrations/0025_dedup_modes.{up,down}.sql. Nothing existing changes, so the reverse only
drops what this one added.
"""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0024_snooze"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0025_dedup_modes"),
            reverse_sql=sql.migration("0025_dedup_modes", "down"),
        ),
    ]
