"""The scheduler check whose work does not grow with the backlog: ``lonnymq_check_v2`` and
``lonnymq_check_limits_v2`` beside their v1 forms (which stay, for the previous release's
code); from sql/migrations/0030_check_v2.{up,down}.sql. Nothing existing changes, so the
reverse only drops what this one added.
"""

from django.db import migrations

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0029_admin_indexes"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0030_check_v2"),
            reverse_sql=sql.migration("0030_check_v2", "down"),
        ),
    ]
