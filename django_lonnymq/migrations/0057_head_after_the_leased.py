"""The dequeue looks for a picked channel's next ready message after the last one it leased
from it, not from the front of the channel's range in the ready index; from
sql/migrations/0057_head_after_the_leased.up.sql. The reverse reinstalls the dequeue as 0056
left it.
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
        ("django_lonnymq", "0056_dequeue_past_held_versions"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0057_head_after_the_leased"),
            reverse_sql=PIN_SEARCH_PATH + sql.restore_previous("0057_head_after_the_leased", *REPLACED),
        ),
    ]
