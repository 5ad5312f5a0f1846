"""Paused is a state of its own: ``lonnymq_queue_stats_v2`` and ``lonnymq_record_samples_v2``
count a paused channel's waiting messages as paused (never ready or scheduled), and samples
gain a ``paused`` column; from sql/migrations/0007_paused_state.{up,down}.sql. The reverse
drops what this step added, then reinstalls ``lonnymq_queue_stats_v1`` as 0006 left it.
"""

from django.db import migrations, models
from django.db.models import Q

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0006_pinned_and_bounded"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0007_paused_state"),
                    # The column goes first: the earlier body of _v1 returns one column fewer.
                    reverse_sql=sql.migration("0007_paused_state", "down")
                    + "\n"
                    + sql.restore_previous("0007_paused_state", "lonnymq_queue_stats_v1"),
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="queuesample",
                    name="paused",
                    field=models.BigIntegerField(
                        default=0,
                        help_text="Messages waiting in paused channels (never counted as ready or scheduled).",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="queuesample",
                    constraint=models.CheckConstraint(
                        condition=Q(paused__gte=0), name="lonnymq_queue_sample_paused_nonnegative"
                    ),
                ),
            ],
        ),
    ]
