"""Slots: ``enqueue(slots=k)`` takes k units of the channel's and the queue's concurrency caps.
``lonnymq_message.slots`` and ``lonnymq_dead_message.slots``, the channel's and the queue's
``head_slots`` (what their next message asks; the eligible index's predicate reads the
channel's), the enqueues that take slots (``lonnymq_enqueue_v4``, ``_many_v4``, ``_keyed_v3``,
``lonnymq_publish_v4``) and the functions that take, give back or count slots; from
sql/migrations/0053_slots.{up,down}.sql. The reverse reinstalls the changed functions as the
migrations before left them, then drops what this one added.
"""

from django.db import migrations, models
from django.db.models import F, Q
from django.db.models.functions import Least

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = (
    "lonnymq_enqueue_keyed_v2",
    "lonnymq_enqueue_v3",
    "lonnymq_enqueue_many_v3",
    "lonnymq_dequeue_held_v1",
    "lonnymq_dequeue_v1",
    "lonnymq_next_due_v1",
    "lonnymq_ack_v1",
    "lonnymq_bury_v1",
    "lonnymq_unlease_v1",
    "lonnymq_requeue_dead_v1",
    "lonnymq_configure_channel_v3",
    "lonnymq_configure_plan_v2",
    "lonnymq_configure_queue_v1",
    "lonnymq_check_v2",
    "lonnymq_queue_stats_v3",
)

SLOTS_HELP = "Units of its channel's and queue's concurrency caps its lease takes."


def _slots_range(model_name: str, field: str, name: str) -> migrations.AddConstraint:
    return migrations.AddConstraint(
        model_name=model_name,
        constraint=models.CheckConstraint(
            condition=models.Q((f"{field}__gte", 1), (f"{field}__lte", 1000000)), name=name
        ),
    )


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0052_ordered_plans"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=sql.migration("0053_slots"),
                    reverse_sql=PIN_SEARCH_PATH
                    + sql.restore_previous("0053_slots", *REPLACED)
                    + "\n"
                    + sql.migration("0053_slots", "down"),
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="message",
                    name="slots",
                    field=models.IntegerField(default=1, help_text=SLOTS_HELP),
                ),
                _slots_range("message", "slots", "lonnymq_message_slots_range"),
                migrations.AddField(
                    model_name="deadmessage",
                    name="slots",
                    field=models.IntegerField(default=1, help_text=SLOTS_HELP),
                ),
                _slots_range("deadmessage", "slots", "lonnymq_dead_message_slots_range"),
                migrations.AddField(
                    model_name="channel",
                    name="head_slots",
                    field=models.IntegerField(
                        default=1,
                        editable=False,
                        help_text="Slots its next message takes, as the last release saw it.",
                    ),
                ),
                _slots_range("channel", "head_slots", "lonnymq_channel_head_slots_range"),
                migrations.AddField(
                    model_name="queueconfig",
                    name="head_slots",
                    field=models.IntegerField(
                        default=1,
                        editable=False,
                        help_text="Slots of the first message the last release left out for want of slots.",
                    ),
                ),
                _slots_range("queueconfig", "head_slots", "lonnymq_queue_config_head_slots_range"),
                migrations.RemoveIndex(model_name="channel", name="lonnymq_channel_eligible_idx"),
                migrations.AddIndex(
                    model_name="channel",
                    index=models.Index(
                        fields=["queue", "next_dequeue_at", "turn"],
                        name="lonnymq_channel_eligible_idx",
                        condition=Q(next_dequeue_at__isnull=False, paused=False)
                        & (
                            Q(max_concurrency__isnull=True)
                            | Q(max_concurrency__gte=F("in_flight") + Least("head_slots", "max_concurrency"))
                        ),
                    ),
                ),
            ],
        ),
    ]
