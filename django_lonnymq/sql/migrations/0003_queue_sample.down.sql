-- django-lonnymq 0003, reversed: drops everything 0003_queue_sample.up.sql created.
DROP FUNCTION IF EXISTS lonnymq_purge_dead_v1(bigint[]);
DROP FUNCTION IF EXISTS lonnymq_delete_channel_v1(bigint);
DROP FUNCTION IF EXISTS lonnymq_record_samples_v1(bigint);
DROP FUNCTION IF EXISTS lonnymq_estimated_rows_v1(regclass);
DROP FUNCTION IF EXISTS lonnymq_channel_counts_v1(bigint[], integer);
DROP FUNCTION IF EXISTS lonnymq_queue_stats_v1(text[]);
DROP TABLE IF EXISTS lonnymq_queue_sample;
