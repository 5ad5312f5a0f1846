"""The dequeue past what a held snapshot keeps: step 1 starts at its session's mark when its
scan from the front read many more entries than it picked, and steps 4 and 5 find the channel
rows it locked by their tids; from sql/migrations/0056_dequeue_past_held_versions.up.sql. The
reverse reinstalls the dequeue as 0055 left it.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored body pins the search_path it is created under (SET search_path FROM CURRENT),
# so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_dequeue_v1",)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0055_capped_bookkeeping"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0056_dequeue_past_held_versions"),
            reverse_sql=PIN_SEARCH_PATH + sql.restore_previous("0056_dequeue_past_held_versions", *REPLACED),
        ),
    ]
