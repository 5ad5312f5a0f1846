"""One live single enqueue: the task, schedule and workflow functions call
``lonnymq_enqueue_v2`` (mode 'skip'), and ``lonnymq_enqueue_v1``, which repeated its body, is
called by nothing of this release (it stays installed for rolling deploys: sql/superseded.sql).
From sql/migrations/0044_one_single_enqueue.up.sql. The reverse reinstalls the three functions
as the migrations before left them.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_enqueue_task_v1", "lonnymq_fire_schedule_v1", "lonnymq_workflow_step_dead_v1")


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0043_cancelled_steps"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0044_one_single_enqueue"),
            reverse_sql=PIN_SEARCH_PATH + sql.restore_previous("0044_one_single_enqueue", *REPLACED),
        ),
    ]
