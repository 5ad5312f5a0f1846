"""Plans that do not depend on how big the tables looked when they were made: the calls a
worker makes for every batch (the dequeues, the acks, the workflow release and inputs) plan
without sequential scans or JIT, and ``lonnymq_workflow_ack_v2`` matches children to their
counts without a nested loop; from sql/migrations/0038_stable_plans.{up,down}.sql. The reverse
reinstalls the six functions as the migrations before left them, then gives
``lonnymq_ack_v1`` back the generic plans 0020 set on it with an ALTER FUNCTION.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = (
    "lonnymq_dequeue_held_v1",
    "lonnymq_dequeue_v1",
    "lonnymq_ack_v1",
    "lonnymq_workflow_release_v2",
    "lonnymq_workflow_ack_v2",
    "lonnymq_workflow_inputs_v1",
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0037_workflow_lean"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0038_stable_plans"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0038_stable_plans", *REPLACED)
            + "\n"
            + sql.migration("0038_stable_plans", "down"),
        ),
    ]
