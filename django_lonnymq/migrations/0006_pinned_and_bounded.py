"""Every function pinned (search_path) and bounded (durations, times, arrays); channel limits
changed one at a time (``lonnymq_configure_channel_v2``); from
sql/migrations/0006_pinned_and_bounded.{up,down}.sql. The reverse reinstalls every function
as the migration before left it, then drops what this one added.
"""

from django.db import migrations, models
from django.db.models import Q

from django_lonnymq import sql

# Every function this migration replaces (its new ones are dropped by the .down.sql file).
REPLACED = (
    "lonnymq_now_ms_v1", "lonnymq_lock_ns_v1", "lonnymq_lock_key_v1", "lonnymq_raise_invalid_v1",
    "lonnymq_check_names_v1", "lonnymq_dequeue_at_v1", "lonnymq_channel_id_v1", "lonnymq_wake_v1",
    "lonnymq_mark_v1", "lonnymq_mark_many_v1", "lonnymq_apply_marks_v1", "lonnymq_enqueue_v1",
    "lonnymq_enqueue_many_v1", "lonnymq_dequeue_v1", "lonnymq_next_due_v1", "lonnymq_give_back_slots_v1",
    "lonnymq_ack_v1", "lonnymq_extend_v1", "lonnymq_bury_v1", "lonnymq_unlease_v1", "lonnymq_fail_v1",
    "lonnymq_release_v1", "lonnymq_reap_v1", "lonnymq_requeue_dead_v1", "lonnymq_cancel_v1",
    "lonnymq_run_now_v1", "lonnymq_purge_channel_v1", "lonnymq_configure_channel_v1",
    "lonnymq_delete_channel_v1", "lonnymq_purge_dead_v1", "lonnymq_check_v1", "lonnymq_queue_stats_v1",
    "lonnymq_channel_counts_v1", "lonnymq_estimated_rows_v1", "lonnymq_record_samples_v1",
)  # fmt: skip


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0005_single_enqueue_mark_once"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0006_pinned_and_bounded"),
                    reverse_sql=sql.restore_previous("0006_pinned_and_bounded", *REPLACED)
                    + "\n"
                    + sql.migration("0006_pinned_and_bounded", "down"),
                ),
            ],
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="channel", name="lonnymq_channel_release_interval_nonnegative"
                ),
                migrations.AddConstraint(
                    model_name="channel",
                    constraint=models.CheckConstraint(
                        condition=Q(release_interval_ms__gte=0, release_interval_ms__lte=31_622_400_000),
                        name="lonnymq_channel_release_interval_range",
                        violation_error_message="Release interval must be between 0 and 366 days.",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="channel",
                    constraint=models.CheckConstraint(
                        condition=Q(queue__regex=r"\S"), name="lonnymq_channel_queue_not_blank"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="channel",
                    constraint=models.CheckConstraint(
                        condition=Q(name__regex=r"\S"), name="lonnymq_channel_name_not_blank"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="message",
                    constraint=models.CheckConstraint(
                        condition=Q(dequeue_at__gte=0, dequeue_at__lte=253_402_300_799_999),
                        name="lonnymq_message_dequeue_at_range",
                    ),
                ),
            ],
        ),
    ]
