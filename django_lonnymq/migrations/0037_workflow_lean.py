"""A lighter workflow start and fan-out ack: no foreign key from a step to its workflow (a
statement trigger deletes a workflow's steps) and no ``lonnymq_workflow_step_workflow_idx``;
``lonnymq_workflow_ack_v2`` locks and counts the children in one statement and
``lonnymq_workflow_release_v2`` reads each step once (a step keeps its payload until its
ack); ``lonnymq_workflow_check_v1`` reports orphaned steps. From
sql/migrations/0037_workflow_lean.{up,down}.sql. The reverse reinstalls the three functions
as the migrations before left them, then puts the index and the key back.
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
    "lonnymq_workflow_release_v2",
    "lonnymq_workflow_ack_v2",
    "lonnymq_workflow_check_v1",
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0036_channel_without_fk"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0037_workflow_lean"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0037_workflow_lean", *REPLACED)
            + "\n"
            + sql.migration("0037_workflow_lean", "down"),
        ),
    ]
