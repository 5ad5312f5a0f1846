-- django-lonnymq 0021, reversed (after the reverse has reinstalled lonnymq_enqueue_v1 and
-- lonnymq_enqueue_many_v1 as the migration before it left them): drops 0021's helper and
-- the schedule's depth constraint.
DROP FUNCTION IF EXISTS lonnymq_raise_too_deep_v1(text, jsonb);
ALTER TABLE lonnymq_schedule DROP CONSTRAINT IF EXISTS lonnymq_schedule_payload_depth;
