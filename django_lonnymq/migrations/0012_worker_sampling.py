"""Workers record the dashboard's samples (``lonnymq_record_samples_due_v1``: one recorder at a
time, under an advisory lock); from sql/migrations/0012_worker_sampling.{up,down}.sql."""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0011_schedule"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0012_worker_sampling"),
            reverse_sql=sql.migration("0012_worker_sampling", "down"),
        ),
    ]
