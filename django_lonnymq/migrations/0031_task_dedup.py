"""Dedup keys for Django Tasks: ``lonnymq_enqueue_task_keyed_v1`` (a task enqueue with a
dedup key and mode, its message and its result row in one call) and
``lonnymq_task_message_idx`` (a message's result, by message id); from
sql/migrations/0031_task_dedup.{up,down}.sql.
"""

from django.db import migrations, models

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0030_check_v2"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0031_task_dedup"),
                    reverse_sql=sql.migration("0031_task_dedup", "down"),
                ),
            ],
            state_operations=[
                migrations.AddIndex(
                    model_name="taskresultrecord",
                    index=models.Index(fields=["message_id"], name="lonnymq_task_message_idx"),
                ),
            ],
        ),
    ]
