"""A step's inputs are bounded (64 MiB, the sum of its parents' outputs as stored): checked
where its last parent acks (the step is dead-lettered as 'inputs_too_large') and at its
dequeue (inputs past the bound are never built). A step records its output's size.
From sql/migrations/0042_bounded_outputs.{up,down}.sql. The reverse reinstalls
lonnymq_workflow_ack_v2 as the migrations before left it, then drops the new functions and
the column.
"""

from django.db import migrations, models

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0041_stripes_everywhere"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0042_bounded_outputs"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0042_bounded_outputs", "lonnymq_workflow_ack_v2")
            + "\n"
            + sql.migration("0042_bounded_outputs", "down"),
            state_operations=[
                migrations.AddField(
                    model_name="workflowsteprecord",
                    name="output_bytes",
                    field=models.IntegerField(blank=True, null=True),
                ),
            ],
        ),
    ]
