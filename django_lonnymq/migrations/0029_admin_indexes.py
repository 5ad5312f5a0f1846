"""Indexes for the dead-letter list: ``lonnymq_dead_died_idx`` (its order, newest first,
unfiltered or by reason) and ``lonnymq_dead_queue_channel_idx`` (by queue and channel). From
sql/migrations/0029_admin_indexes.{up,down}.sql.
"""

from django.db import migrations, models

from django_lonnymq import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0028_channel_prune"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0029_admin_indexes"),
                    reverse_sql=sql.migration("0029_admin_indexes", "down"),
                ),
            ],
            state_operations=[
                migrations.AddIndex(
                    model_name="deadmessage",
                    index=models.Index(fields=["died_at"], name="lonnymq_dead_died_idx"),
                ),
                migrations.AddIndex(
                    model_name="deadmessage",
                    index=models.Index(
                        fields=["queue", "channel_name", "died_at"], name="lonnymq_dead_queue_channel_idx"
                    ),
                ),
            ],
        ),
    ]
