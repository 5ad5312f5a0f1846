-- Frozen history: the reverse of 0020_generic_plans.up.sql (a test pins this file).
ALTER FUNCTION lonnymq_dequeue_held_v1(text, integer, bigint, bigint, text, uuid) RESET plan_cache_mode;
ALTER FUNCTION lonnymq_dequeue_v1(text, integer, bigint, text, bigint, bigint) RESET plan_cache_mode;
ALTER FUNCTION lonnymq_ack_v1(bigint[], uuid[]) RESET plan_cache_mode;
