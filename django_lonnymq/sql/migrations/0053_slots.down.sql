-- django-lonnymq 0053, reversed (after the changed functions are put back as the
-- migrations before left them): the new functions, columns and constraints go, and the
-- eligible index gets its previous predicate.
DROP FUNCTION IF EXISTS lonnymq_publish_v4(text, text[], jsonb[], bigint[], text[], text[], integer, bigint, bigint,
                                           integer[], integer[]);
DROP FUNCTION IF EXISTS lonnymq_enqueue_many_v4(text, text[], jsonb[], bigint[], bigint[], integer[], text[], text[],
                                                integer[], integer, bigint, bigint, integer[], integer[]);
DROP FUNCTION IF EXISTS lonnymq_enqueue_v4(text, text, jsonb, bigint, bigint, integer, text, text, integer, bigint,
                                           bigint, integer, integer);
DROP FUNCTION IF EXISTS lonnymq_enqueue_keyed_v3(bigint, text, text, bigint, jsonb, bigint, integer, integer, integer,
                                                 integer);
DROP FUNCTION IF EXISTS lonnymq_check_slots_v1(text, bigint[], integer[], boolean);
DROP FUNCTION IF EXISTS lonnymq_give_back_slots_v2(bigint[], integer[]);
DROP FUNCTION IF EXISTS lonnymq_give_back_queue_slots_v2(bigint[], integer[]);
DROP INDEX lonnymq_channel_eligible_idx;
CREATE INDEX lonnymq_channel_eligible_idx ON lonnymq_channel (queue, next_dequeue_at, turn)
    WHERE next_dequeue_at IS NOT NULL
      AND NOT paused
      AND (max_concurrency IS NULL OR in_flight < max_concurrency);
ALTER TABLE lonnymq_queue_config DROP COLUMN head_slots;
ALTER TABLE lonnymq_channel DROP COLUMN head_slots;
ALTER TABLE lonnymq_dead_message DROP COLUMN slots;
ALTER TABLE lonnymq_message DROP COLUMN slots;
-- The statistics function came back as 0035 defined it: 0047's settings again.
ALTER FUNCTION lonnymq_queue_stats_v3(text[], bigint) SET enable_bitmapscan = off;
ALTER FUNCTION lonnymq_queue_stats_v3(text[], bigint) SET enable_sort = off;
