-- Named read-only queries of the operator's views (admin, dashboard, lonnymq_stats,
-- metrics). Same format as queries.sql. Nothing here writes (a test runs each in a READ ONLY
-- transaction): writes go through django_lonnymq.api and queries.sql.

-- name: queue_stats
SELECT * FROM lonnymq_queue_stats_v2(%(queues)s::text[])

-- name: channel_counts
SELECT channel_id, ready, scheduled, in_flight FROM lonnymq_channel_counts_v1(%(ids)s::bigint[], %(cap)s::integer)

-- name: estimated_rows
SELECT lonnymq_estimated_rows_v1(%(table)s::regclass)


-- name: live_workers
-- Workers that are live (not stopped, heard from within the lost-after time) per queue they serve.
SELECT q.queue, pg_catalog.count(*) AS live
  FROM lonnymq_worker w CROSS JOIN LATERAL pg_catalog.unnest(w.queues) AS q(queue)
 WHERE w.stopped_at IS NULL
   AND w.heartbeat_at >= pg_catalog.now() - pg_catalog.make_interval(secs => %(lost_after_s)s::double precision)
 GROUP BY q.queue
