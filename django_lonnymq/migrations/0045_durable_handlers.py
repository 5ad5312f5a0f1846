"""Durable handlers: step checkpoints, suspended sleeps and waits, events (docs/durable.md).
From sql/migrations/0045_durable_handlers.{up,down}.sql.
"""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0044_one_single_enqueue"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0045_durable_handlers"),
            reverse_sql=sql.migration("0045_durable_handlers", "down"),
        ),
    ]
