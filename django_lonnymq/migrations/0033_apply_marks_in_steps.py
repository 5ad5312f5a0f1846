"""A dequeue applies producers' wake-up marks in steps: ``lonnymq_apply_marks_v1`` takes
batches of 200 from the queue's index in its order, for at most about 10 ms a call, so the
marks a bulk enqueue leaves never stall a dequeue; ``lonnymq_dequeue_held_v1`` reads a
queue's first due marks through the new ``lonnymq_marks_due_v1``, from the same index. From
sql/migrations/0033_apply_marks_in_steps.{up,down}.sql. The reverse reinstalls the two
functions as the migrations before left them, then drops the new one.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored body pins the search_path it is created under (SET search_path FROM CURRENT),
# so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_apply_marks_v1", "lonnymq_dequeue_held_v1")


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0032_workflow_ack_v2"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0033_apply_marks_in_steps"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0033_apply_marks_in_steps", *REPLACED)
            + "\n"
            + sql.migration("0033_apply_marks_in_steps", "down"),
        ),
    ]
