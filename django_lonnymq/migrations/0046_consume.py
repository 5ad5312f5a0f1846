"""api.consume(): a channel's token bucket spent outside jobs (``lonnymq_consume_v1``).
From sql/migrations/0046_consume.up.sql; the reverse drops the function.
"""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0045_durable_handlers"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0046_consume"),
            reverse_sql=sql.migration("0046_consume", "down"),
        ),
    ]
