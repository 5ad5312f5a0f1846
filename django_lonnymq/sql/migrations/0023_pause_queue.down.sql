-- django-lonnymq 0023, reversed (after the reverse has reinstalled lonnymq_dequeue_v1,
-- lonnymq_next_due_v1 and lonnymq_configure_queue_v1 as the migrations before left them):
-- drops lonnymq_pause_queue_v1 and the paused column; a row that held only the pause goes.
DROP FUNCTION IF EXISTS lonnymq_pause_queue_v1(text, boolean);
-- The body restored from 0019 lacks the setting 0020_generic_plans added to it.
ALTER FUNCTION lonnymq_dequeue_v1(text, integer, bigint, text, bigint, bigint)
    SET plan_cache_mode = force_generic_plan;
DELETE FROM lonnymq_queue_config WHERE max_concurrency IS NULL AND rate_count IS NULL;
ALTER TABLE lonnymq_queue_config DROP CONSTRAINT IF EXISTS lonnymq_queue_config_has_a_limit;
ALTER TABLE lonnymq_queue_config ADD CONSTRAINT lonnymq_queue_config_has_a_limit
    CHECK (max_concurrency IS NOT NULL OR rate_count IS NOT NULL);
ALTER TABLE lonnymq_queue_config DROP COLUMN IF EXISTS paused;
