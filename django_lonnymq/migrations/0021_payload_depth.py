"""A payload may nest at most 100 levels deep (``bounds.MAX_PAYLOAD_DEPTH``):
``lonnymq_enqueue_v1`` and ``lonnymq_enqueue_many_v1`` (same names, arguments and results)
refuse a deeper one as LQ001 through the new ``lonnymq_raise_too_deep_v1``, and the schedule
table gets the CHECK constraint ``lonnymq_schedule_payload_depth``. From
sql/migrations/0021_payload_depth.{up,down}.sql. The reverse reinstalls both functions as the
migrations before left them, then drops what this one added.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_enqueue_v1", "lonnymq_enqueue_many_v1")


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0020_generic_plans"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0021_payload_depth"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0021_payload_depth", *REPLACED)
            + "\n"
            + sql.migration("0021_payload_depth", "down"),
        ),
    ]
