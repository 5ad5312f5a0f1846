"""The eligible mark of a queue's dequeues under a held snapshot, shared by its sessions
(``lonnymq_eligible_mark``), so that they scan from the front about once a second between them;
from sql/migrations/0061_eligible_mark_shared.up.sql. The reverse reinstalls the dequeue as
0060 left it, then drops the table and the lock namespace's function.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0060_held_calls_from_the_mark"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0061_eligible_mark_shared"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0061_eligible_mark_shared", "lonnymq_dequeue_v1")
            + "\nDROP FUNCTION lonnymq_mark_lock_ns_v1();"
            + "\nDROP TABLE lonnymq_eligible_mark;",
        ),
    ]
