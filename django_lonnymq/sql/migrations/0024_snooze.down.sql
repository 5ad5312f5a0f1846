-- django-lonnymq 0024, reversed (after the reverse has reinstalled lonnymq_bury_v1 and
-- lonnymq_requeue_dead_v1 as the migrations before left them): drops lonnymq_snooze_v1 and
-- the snoozes columns.
DROP FUNCTION IF EXISTS lonnymq_snooze_v1(bigint, uuid, bigint, integer, bigint, bigint, bigint);
ALTER TABLE lonnymq_dead_message DROP COLUMN IF EXISTS snoozes;
ALTER TABLE lonnymq_message DROP COLUMN IF EXISTS snoozes;
