"""Operators' figures whose work does not grow with the backlog: ``lonnymq_queue_stats_v3``
(exact up to a cap per queue, estimated past it, with an ``estimated`` column),
``lonnymq_record_samples_v3`` and ``lonnymq_record_samples_due_v2`` beside the forms they
replace (which stay, for the previous release's code); from
sql/migrations/0035_stats_at_size.{up,down}.sql. Nothing existing changes, so the reverse
only drops what this one added.
"""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0034_workflow_step_arrays"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0035_stats_at_size"),
            reverse_sql=sql.migration("0035_stats_at_size", "down"),
        ),
    ]
