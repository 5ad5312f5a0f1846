"""``lonnymq_enqueue_many_v1`` runs every valid batch as one set-based statement (no scratch
table), ``lonnymq_mark_many_v1`` leaves no second mark where a committed one will do, and
``lonnymq_delete_channel_v1`` deletes the channel's wake-up marks with it; from
sql/migrations/0004_set_based_enqueue_many.up.sql. Names, signatures, results and errors
stay; the reverse reinstalls the earlier bodies from the files that installed them.
"""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0003_queue_sample"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0004_set_based_enqueue_many"),
            reverse_sql=sql.restore("0001_initial", "lonnymq_mark_many_v1", "lonnymq_enqueue_many_v1")
            + sql.restore("0003_queue_sample", "lonnymq_delete_channel_v1"),
        ),
    ]
