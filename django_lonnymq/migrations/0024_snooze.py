"""Snooze: a handler's wait that spends no attempt (``lonnymq_snooze_v1``), counted in
``lonnymq_message.snoozes`` and carried to ``lonnymq_dead_message.snoozes`` and back; from
sql/migrations/0024_snooze.{up,down}.sql. The reverse reinstalls the changed functions as the
migrations before left them, then drops what this one added.
"""

from django.db import migrations, models

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = ("lonnymq_bury_v1", "lonnymq_requeue_dead_v1")


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0023_pause_queue"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0024_snooze"),
                    reverse_sql=PIN_SEARCH_PATH
                    + sql.restore_previous("0024_snooze", *REPLACED)
                    + "\n"
                    + sql.migration("0024_snooze", "down"),
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="message",
                    name="snoozes",
                    field=models.IntegerField(
                        default=0, help_text="Times a handler snoozed it (no attempt spent)."
                    ),
                ),
                migrations.AddConstraint(
                    model_name="message",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("snoozes__gte", 0)), name="lonnymq_message_snoozes_nonnegative"
                    ),
                ),
                migrations.AddField(
                    model_name="deadmessage",
                    name="snoozes",
                    field=models.IntegerField(
                        default=0, help_text="Times a handler snoozed it (no attempt spent)."
                    ),
                ),
                migrations.AddConstraint(
                    model_name="deadmessage",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("snoozes__gte", 0)),
                        name="lonnymq_dead_message_snoozes_nonnegative",
                    ),
                ),
            ],
        ),
    ]
