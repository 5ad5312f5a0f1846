"""A channel's identity (id, queue, name) and its uniqueness move to ``lonnymq_channel_key``, a
row written once; ``lonnymq_channel``, which every dequeue's visit rewrites, keeps plain
indexes; from sql/migrations/0059_channel_key.up.sql. The model's state does not change: the
``Channel`` model keeps its primary key and its unique (queue, name), which the key table now
holds for it. The reverse reinstalls the functions as 0058 left them, puts the constraints
back on ``lonnymq_channel`` and drops the key table.
"""

from django.db import migrations

from django_lonnymq import sql

# The restored bodies pin the search_path they are created under (SET search_path FROM
# CURRENT), so the reverse sets it first, as every .up.sql file does.
PIN_SEARCH_PATH = (
    "SELECT pg_catalog.set_config('search_path', "
    "pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);\n"
)

REPLACED = (
    "lonnymq_channel_id_v1",
    "lonnymq_enqueue_many_v4",
    "lonnymq_enqueue_many_v1",
    "lonnymq_enqueue_many_v2",
    "lonnymq_check_v2",
)

# The functions 0059 runs without JIT by an ALTER (the replaced ones by their new bodies).
WITHOUT_JIT = (
    "lonnymq_mark_v1",
    "lonnymq_mark_many_v1",
    "lonnymq_apply_marks_v1",
    "lonnymq_hold_channels_v1",
    "lonnymq_check_costs_v1",
    "lonnymq_check_slots_v1",
    "lonnymq_enqueue_v4",
    "lonnymq_enqueue_task_keyed_v1",
    "lonnymq_next_due_v1",
    "lonnymq_give_back_slots_v2",
    "lonnymq_give_back_queue_slots_v2",
    "lonnymq_reap_v1",
    "lonnymq_requeue_dead_v1",
    "lonnymq_lift_holds_v1",
    "lonnymq_run_now_v1",
    "lonnymq_configure_channel_v3",
    "lonnymq_delete_plan_v1",
    "lonnymq_configure_channel_v4",
    "lonnymq_configure_queue_v1",
    "lonnymq_delete_channel_v1",
    "lonnymq_prune_channels_v1",
    "lonnymq_check_limits_v2",
    "lonnymq_emit_event_v1",
    "lonnymq_consume_v1",
    "lonnymq_order_channel_v1",
    "lonnymq_unblock_channel_v1",
)

REVERSE_TABLES = """
ALTER TABLE lonnymq_channel ALTER COLUMN id RESET (n_distinct);
DROP TRIGGER lonnymq_channel_truncated ON lonnymq_channel;
DROP TRIGGER lonnymq_channel_gone ON lonnymq_channel;
DROP TRIGGER lonnymq_channel_key ON lonnymq_channel;
DROP FUNCTION lonnymq_channel_gone_v1();
DROP FUNCTION lonnymq_channel_key_v1();
DROP INDEX lonnymq_channel_queue_name_idx;
DROP INDEX lonnymq_channel_id_idx;
ALTER TABLE lonnymq_channel ADD CONSTRAINT lonnymq_channel_pkey PRIMARY KEY (id),
                            ADD CONSTRAINT lonnymq_channel_queue_name_uniq UNIQUE (queue, name);
ALTER TABLE lonnymq_dead_message DROP CONSTRAINT lonnymq_dead_message_channel_id_fkey;
ALTER TABLE lonnymq_dead_message ADD CONSTRAINT lonnymq_dead_message_channel_id_fkey
    FOREIGN KEY (channel_id) REFERENCES lonnymq_channel (id) ON DELETE SET NULL;
DROP TABLE lonnymq_channel_key;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("django_lonnymq", "0058_ready_scan_after_the_taken"),
    ]

    operations = [
        migrations.RunSQL(
            sql=sql.migration("0059_channel_key"),
            reverse_sql=PIN_SEARCH_PATH
            + sql.restore_previous("0059_channel_key", *REPLACED)
            + "".join(f"\nALTER FUNCTION {name} RESET jit;" for name in WITHOUT_JIT)
            + REVERSE_TABLES,
        ),
    ]
