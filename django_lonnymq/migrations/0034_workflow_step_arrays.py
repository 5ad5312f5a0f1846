"""A workflow's edges become arrays on its steps' rows (``parents``, ``children``); the
edge table becomes a view of them with the same columns; ``lonnymq_workflow_start_v1``,
``lonnymq_workflow_ack_v2`` and ``lonnymq_workflow_check_v1`` read and write the arrays.
From sql/migrations/0034_workflow_step_arrays.{up,down}.sql. The reverse reinstalls the
three functions as the migrations before left them, then rebuilds the edge table from the
arrays.
"""

import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_workflow_start_v1", "lonnymq_workflow_ack_v2", "lonnymq_workflow_check_v1")


def _ids() -> django.contrib.postgres.fields.ArrayField:
    return django.contrib.postgres.fields.ArrayField(models.BigIntegerField(), default=list, blank=True)


def _edge_end(related_name: str) -> models.ForeignKey:
    return models.ForeignKey(
        db_constraint=False,
        on_delete=django.db.models.deletion.DO_NOTHING,
        related_name=related_name,
        to="django_lonnymq.workflowsteprecord",
    )


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0033_apply_marks_in_steps"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0034_workflow_step_arrays"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0034_workflow_step_arrays", *REPLACED)
            + "\n"
            + sql.migration("0034_workflow_step_arrays", "down"),
            state_operations=[
                migrations.AddField(model_name="workflowsteprecord", name="parents", field=_ids()),
                migrations.AddField(model_name="workflowsteprecord", name="children", field=_ids()),
                # A view now: its rows go with their step's, nothing deletes them.
                migrations.AlterField(
                    model_name="workflowedgerecord", name="child", field=_edge_end("parent_edges")
                ),
                migrations.AlterField(
                    model_name="workflowedgerecord", name="parent", field=_edge_end("child_edges")
                ),
            ],
        ),
    ]
