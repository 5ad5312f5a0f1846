-- django-lonnymq 0035, reversed: drops the functions it added (the v2/v1 functions were left
-- as they were).
DROP FUNCTION IF EXISTS lonnymq_record_samples_due_v2(bigint, bigint, bigint);
DROP FUNCTION IF EXISTS lonnymq_record_samples_v3(bigint, bigint);
DROP FUNCTION IF EXISTS lonnymq_queue_stats_v3(text[], bigint);
