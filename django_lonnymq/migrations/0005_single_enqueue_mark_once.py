"""``lonnymq_mark_v1`` (a single enqueue's wake-up) leaves no second mark where one already
there will do, as ``lonnymq_mark_many_v1`` does since 0004; from
sql/migrations/0005_single_enqueue_mark_once.up.sql. Name, signature and result stay; the
reverse reinstalls the 0001 body from 0001's file.
"""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0004_set_based_enqueue_many"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0005_single_enqueue_mark_once"),
            reverse_sql=sql.restore("0001_initial", "lonnymq_mark_v1"),
        ),
    ]
