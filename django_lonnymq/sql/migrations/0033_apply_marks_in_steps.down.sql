-- django-lonnymq 0033, reversed (after the reverse has reinstalled lonnymq_apply_marks_v1
-- and lonnymq_dequeue_held_v1 as the migrations before left them): drops the marks helper.
DROP FUNCTION IF EXISTS lonnymq_marks_due_v1(text, bigint, integer);
-- The body of lonnymq_dequeue_held_v1 restored from 0026 lacks the setting 0020_generic_plans
-- added to it.
ALTER FUNCTION lonnymq_dequeue_held_v1(text, integer, bigint, bigint, text, uuid)
    SET plan_cache_mode = force_generic_plan;
