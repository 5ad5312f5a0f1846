"""A step's ack counts its children from arrays: ``lonnymq_workflow_ack_v2`` (same contract)
reads the children it counts through their primary key, one probe each, whatever the
planner knows of the tables. From sql/migrations/0037_workflow_ack_counts.up.sql.
The reverse reinstalls the function as the migrations before left it.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored body pins the search_path it is created under (SET search_path FROM CURRENT),
# so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_workflow_ack_v2",)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0036_channel_without_fk"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0037_workflow_ack_counts"),
            reverse_sql=PIN_SEARCH_PATH + sql.restore_previous("0037_workflow_ack_counts", *REPLACED),
        ),
    ]
