"""What a capped channel's bookkeeping costs a queue that never uses slots: the give-back of an
ack writes its channels in one statement, and the dequeue counts a capped channel's leases
unless one takes more than one slot; from sql/migrations/0055_capped_bookkeeping.up.sql. The
reverse reinstalls both functions as 0053 left them.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored body pins the search_path it is created under (SET search_path FROM CURRENT),
# so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_give_back_slots_v2", "lonnymq_dequeue_v1")


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0054_ordered_resume"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0055_capped_bookkeeping"),
            reverse_sql=PIN_SEARCH_PATH + sql.restore_previous("0055_capped_bookkeeping", *REPLACED),
        ),
    ]
