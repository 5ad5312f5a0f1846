-- django-lonnymq 0013, reversed: drops what 0013_enqueue_task.up.sql created.
DROP FUNCTION IF EXISTS lonnymq_enqueue_task_v1(text, text, jsonb, bigint, integer, integer, timestamptz, timestamptz, bigint, bigint);
