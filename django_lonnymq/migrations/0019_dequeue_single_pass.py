"""A dequeue returns the rows its lease update wrote instead of reading them again
(``lonnymq_dequeue_v1``, ``lonnymq_dequeue_held_v1``: same names, arguments and results);
from sql/migrations/0019_dequeue_single_pass.up.sql. The reverse reinstalls both as the
migrations before left them.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_dequeue_held_v1", "lonnymq_dequeue_v1")


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0018_queue_limits"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0019_dequeue_single_pass"),
            reverse_sql=PIN_SEARCH_PATH + sql.restore_previous("0019_dequeue_single_pass", *REPLACED),
        ),
    ]
