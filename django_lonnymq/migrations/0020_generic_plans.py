"""The functions a drain calls for every batch (``lonnymq_dequeue_v1``,
``lonnymq_dequeue_held_v1``, ``lonnymq_ack_v1``) run their statements on generic plans
(``SET plan_cache_mode = force_generic_plan``); from sql/migrations/0020_generic_plans.{up,down}.sql.
"""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0019_dequeue_single_pass"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0020_generic_plans"),
            reverse_sql=sql.migration("0020_generic_plans", "down"),
        ),
    ]
