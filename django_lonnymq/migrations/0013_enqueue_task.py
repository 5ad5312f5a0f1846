"""A Django Task's message and result row in one call: ``lonnymq_enqueue_task_v1``, from
sql/migrations/0013_enqueue_task.{up,down}.sql (see django_lonnymq/tasks.py)."""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0012_worker_sampling"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0013_enqueue_task"),
            reverse_sql=sql.migration("0013_enqueue_task", "down"),
        ),
    ]
