"""While a session's dequeues start at their mark (a held snapshot), its held-channel dequeues
and its next-due reads start there too, and a scan from the front that found no channel it
could lock keeps the mark; from sql/migrations/0060_held_calls_from_the_mark.up.sql. The
reverse reinstalls the three functions as 0059 left them.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_dequeue_held_v1", "lonnymq_dequeue_v1", "lonnymq_next_due_v1")


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0059_channel_key"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0060_held_calls_from_the_mark"),
            # next_due's body as 0058 installed it, and 0059's ALTER of it.
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0060_held_calls_from_the_mark", *REPLACED)
            + "\nALTER FUNCTION lonnymq_next_due_v1 SET jit = off;",
        ),
    ]
