"""The error of a cancel that names unknown ids gives their count and the first 20, not every
one (``lonnymq_cancel_v2``: same name, arguments, results and SQLSTATE; DETAIL still lists
them all); from sql/migrations/0022_cancel_message_cap.up.sql. The reverse reinstalls the
function as the migrations before left it.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored body pins the search_path it is created under (SET search_path FROM CURRENT),
# so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0021_payload_depth"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0022_cancel_message_cap"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0022_cancel_message_cap", "lonnymq_cancel_v2"),
        ),
    ]
