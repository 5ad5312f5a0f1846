"""The ack of workflow steps through indexes, one update per released child:
``lonnymq_workflow_ack_v2`` and ``lonnymq_workflow_release_v2``. From
sql/migrations/0032_workflow_ack_v2.{up,down}.sql.
"""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0031_task_dedup"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0032_workflow_ack_v2"),
            reverse_sql=sql.migration("0032_workflow_ack_v2", "down"),
        ),
    ]
