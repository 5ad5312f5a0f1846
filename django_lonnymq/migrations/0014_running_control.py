"""Running messages under control: ``cancel_requested`` on a message, dead-letter reasons
``timeout`` and ``cancelled``, ``lonnymq_extend_v2`` / ``lonnymq_fail_v2`` /
``lonnymq_cancel_v2``; from sql/migrations/0014_running_control.{up,down}.sql. The reverse
drops what it added (and pins the search_path), then reinstalls the two functions it replaced.
"""

from django.db import migrations, models
from django.db.models import Q

from django_lonnymq import sql

REPLACED = ("lonnymq_bury_v1", "lonnymq_unlease_v1")


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0013_enqueue_task"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0014_running_control"),
                    reverse_sql=sql.migration("0014_running_control", "down")
                    + "\n"
                    + sql.restore_previous("0014_running_control", *REPLACED),
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="message",
                    name="cancel_requested",
                    field=models.BooleanField(default=False),
                ),
                migrations.RemoveConstraint(
                    model_name="deadmessage", name="lonnymq_dead_message_reason_known"
                ),
                migrations.AddConstraint(
                    model_name="deadmessage",
                    constraint=models.CheckConstraint(
                        condition=Q(
                            reason__in=["failed", "discarded", "lease_expired", "timeout", "cancelled"]
                        ),
                        name="lonnymq_dead_message_reason_known",
                    ),
                ),
                migrations.AlterField(
                    model_name="deadmessage",
                    name="reason",
                    field=models.CharField(
                        choices=[
                            ("failed", "failed"),
                            ("discarded", "discarded"),
                            ("lease_expired", "lease expired"),
                            ("timeout", "timed out"),
                            ("cancelled", "cancelled"),
                        ],
                        max_length=20,
                    ),
                ),
            ],
        ),
    ]
