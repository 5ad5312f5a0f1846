"""``lonnymq_enqueue_many_v1`` runs every valid batch as one set-based statement (no scratch
table), ``lonnymq_mark_many_v1`` leaves no second mark where a committed one will do, and
``lonnymq_delete_channel_v1`` deletes the channel's wake-up marks with it; from
sql/0004_set_based_enqueue_many.{up,down}.sql. Names, signatures, results and errors stay;
the down file restores the earlier bodies.
"""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0003_queue_sample"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.read("0004_set_based_enqueue_many.up.sql"),
            reverse_sql=sql.read("0004_set_based_enqueue_many.down.sql"),
        ),
    ]
