-- django-lonnymq 0012, reversed: drops the function 0012_worker_sampling.up.sql created.
DROP FUNCTION IF EXISTS lonnymq_record_samples_due_v1(bigint, bigint);
