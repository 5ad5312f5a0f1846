-- Named queries of the operator's views (admin, dashboard, lonnymq_stats, metrics), over
-- the functions of 0003_queue_sample.up.sql. Same format as queries.sql.

-- name: queue_stats
SELECT * FROM lonnymq_queue_stats_v1(%(queues)s::text[])

-- name: record_samples
SELECT * FROM lonnymq_record_samples_v1(%(keep_ms)s::bigint)

-- name: channel_counts
SELECT channel_id, ready, scheduled, in_flight FROM lonnymq_channel_counts_v1(%(ids)s::bigint[], %(cap)s::integer)

-- name: estimated_rows
SELECT lonnymq_estimated_rows_v1(%(table)s::regclass)

-- name: delete_channel
SELECT lonnymq_delete_channel_v1(%(id)s::bigint)

-- name: purge_dead
SELECT lonnymq_purge_dead_v1(%(ids)s::bigint[])
