-- django-lonnymq 0008, reversed: drops everything 0008_workers.up.sql created.
DROP FUNCTION IF EXISTS lonnymq_worker_stop_v1(text, uuid, integer, bigint, bigint);
DROP FUNCTION IF EXISTS lonnymq_worker_beat_v1(text, uuid, text, integer, text[], integer, timestamptz, integer, bigint, bigint, bigint, bigint);
DROP TABLE IF EXISTS lonnymq_worker;
