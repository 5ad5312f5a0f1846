"""The time until which a queue's candidate scans start after the taken (under a held snapshot),
shared by its sessions (``lonnymq_ready_mark``); from sql/migrations/0062_ready_state_shared.up.sql.
The reverse reinstalls the three functions as 0061 left them, then drops what this one added.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_ready_from_v1", "lonnymq_dequeue_held_v1", "lonnymq_dequeue_v1")


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0061_eligible_mark_shared"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0062_ready_state_shared"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0062_ready_state_shared", *REPLACED)
            + "\nDROP FUNCTION lonnymq_ready_after_v1(text, bigint, text);"
            + "\nDROP FUNCTION lonnymq_ready_lock_ns_v1();"
            + "\nDROP TABLE lonnymq_ready_mark;",
        ),
    ]
