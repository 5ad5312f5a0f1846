"""Strict order and durable handlers: running a held message now, resuming it, or emitting the
event it waits for ends its ordered channel's hold (``lonnymq_lift_holds_v1``, called by
``lonnymq_run_now_v1`` and ``lonnymq_emit_event_v1``); from
sql/migrations/0054_ordered_resume.{up,down}.sql. The reverse reinstalls the two functions as
the migrations before left them, then drops the new one. The workers' ``in_flight`` counts
handler calls (a batch once): its help text says so (no SQL).
"""

from django.db import migrations, models

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_run_now_v1", "lonnymq_emit_event_v1")


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0053_slots"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0054_ordered_resume"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0054_ordered_resume", *REPLACED)
            + "\n"
            + sql.migration("0054_ordered_resume", "down"),
        ),
        migrations.AlterField(
            model_name="worker",
            name="in_flight",
            field=models.IntegerField(
                default=0,
                help_text="Handler calls it held at its last heartbeat, running or waiting for a thread (a batch counts once).",
            ),
        ),
    ]
