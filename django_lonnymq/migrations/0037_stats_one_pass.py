"""The queues' figures (``lonnymq_queue_stats_v2``: same name, arguments and result) count
the waiting messages of every queue in one pass over the message table, grouped by channel,
instead of channel by channel; a call for named queues still looks up their channels. From
sql/migrations/0037_stats_one_pass.up.sql. The reverse reinstalls the function as the
migrations before left it.
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
        ("django_lonnymq", "0033_apply_marks_in_steps"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0037_stats_one_pass"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0037_stats_one_pass", "lonnymq_queue_stats_v2"),
        ),
    ]
