"""Costs for topics: ``publish(cost=k)`` and ``Event(cost=k)``. ``lonnymq_publish_v3`` takes
each event's cost and hands it to ``lonnymq_enqueue_many_v3`` for every subscribed queue
(``lonnymq_publish_v2`` stays installed for the previous release: superseded.sql); from
sql/migrations/0051_publish_costs.{up,down}.sql. Nothing is replaced, so the reverse drops
the new function.
"""

from django.db import migrations

from django_lonnymq import sql

# The up step pins the search_path it creates the function under (SET search_path FROM
# CURRENT), so the reverse sets it first too: the drop finds the function it created.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0050_strict_order"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0051_publish_costs"),
            reverse_sql=PIN_SEARCH_PATH + sql.migration("0051_publish_costs", "down"),
        ),
    ]
