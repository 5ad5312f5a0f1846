"""The trace context of messages enqueued inside an OpenTelemetry span (``lonnymq_trace``, no
model: only django_lonnymq.tracing reads and writes it); from sql/migrations/0016_trace.{up,down}.sql."""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0015_dequeue_held_channels"),
    ]

    operations = [
        migrations.RunSQL(sql=sql.migration("0016_trace"), reverse_sql=sql.migration("0016_trace", "down")),
    ]
