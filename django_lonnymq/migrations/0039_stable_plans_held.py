"""Plans that do not depend on how big the tables looked when they were made, for the rest of
a worker's calls on the messages it holds: the heartbeat (``lonnymq_extend_v2``), a failure
or retry (``lonnymq_fail_v2``), a snooze, a release, and the three functions they call
(``lonnymq_unlease_v1``, ``lonnymq_bury_v1``, ``lonnymq_wake_v1``) plan without sequential
scans or JIT, as 0038 did for the dequeues and acks; from sql/migrations/0039_stable_plans_held.up.sql.
The reverse reinstalls the seven functions as the migrations before left them (no earlier
migration altered their settings).
"""

from django.db import migrations

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = (
    "lonnymq_wake_v1",
    "lonnymq_bury_v1",
    "lonnymq_unlease_v1",
    "lonnymq_extend_v2",
    "lonnymq_fail_v2",
    "lonnymq_snooze_v1",
    "lonnymq_release_v1",
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0038_stable_plans"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0039_stable_plans_held"),
            reverse_sql=PIN_SEARCH_PATH + sql.restore_previous("0039_stable_plans_held", *REPLACED),
        ),
    ]
