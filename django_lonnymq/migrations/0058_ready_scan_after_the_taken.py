"""A channel keeps the last message a dequeue took from it (``taken_at``, ``taken_id``), where
the dequeue starts its candidate scans while a held snapshot fills the front of the ready
index; from sql/migrations/0058_ready_scan_after_the_taken.up.sql. The reverse reinstalls the
dequeue as 0057 left it, then drops the two columns.
"""

from django.db import migrations, models

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_dequeue_held_v1", "lonnymq_dequeue_v1")

TAKEN_HELP = (
    "The last message a dequeue took from it: {} (candidate scans start after it under a held snapshot)."
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0057_head_after_the_leased"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0058_ready_scan_after_the_taken"),
                    reverse_sql=PIN_SEARCH_PATH
                    + sql.restore_previous("0058_ready_scan_after_the_taken", *REPLACED)
                    + "\nDROP FUNCTION lonnymq_ready_from_v1(text, bigint, bigint, integer);"
                    + "\nALTER TABLE lonnymq_channel DROP COLUMN taken_at, DROP COLUMN taken_id;",
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="channel",
                    name="taken_at",
                    field=models.BigIntegerField(
                        null=True,
                        blank=True,
                        editable=False,
                        help_text=TAKEN_HELP.format("its release time (ms)"),
                    ),
                ),
                migrations.AddField(
                    model_name="channel",
                    name="taken_id",
                    field=models.BigIntegerField(
                        null=True, blank=True, editable=False, help_text=TAKEN_HELP.format("its id")
                    ),
                ),
            ],
        ),
    ]
