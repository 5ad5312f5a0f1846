-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0020: the functions a drain calls for every batch run on generic plans.
-- - lonnymq_dequeue_v1, lonnymq_dequeue_held_v1 and lonnymq_ack_v1 (same names, arguments
--   and results) get SET plan_cache_mode = force_generic_plan: their statements over id
--   arrays were planned afresh at every call, because a custom plan, which sees the arrays'
--   lengths, always looked cheaper than the generic one. That planning was a third of the
--   time of a dequeue or an ack of one message.
ALTER FUNCTION lonnymq_dequeue_held_v1(text, integer, bigint, bigint, text, uuid)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION lonnymq_dequeue_v1(text, integer, bigint, text, bigint, bigint)
    SET plan_cache_mode = force_generic_plan;
ALTER FUNCTION lonnymq_ack_v1(bigint[], uuid[])
    SET plan_cache_mode = force_generic_plan;
