"""Periodic schedules hardened: no polymorphic operator in lonnymq_fire_schedule_v1, pinned
jsonb operators in the syncs, and lonnymq_sync_schedules_v2 (deletes only the declared rows of
the queues a worker serves); from sql/migrations/0017_schedule_hardening.{up,down}.sql. The
reverse drops v2 (and pins the search_path), then reinstalls the bodies 0011 installed.
"""

from django.db import migrations

from django_lonnymq import sql

REPLACED = ("lonnymq_fire_schedule_v1", "lonnymq_sync_schedules_v1")


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0016_trace"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0017_schedule_hardening"),
            reverse_sql=sql.migration("0017_schedule_hardening", "down")
            + "\n"
            + sql.restore_previous("0017_schedule_hardening", *REPLACED),
        ),
    ]
