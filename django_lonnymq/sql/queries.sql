-- Named queries the Python layer runs. Each "-- name: X" header starts a query; the loader
-- (django_lonnymq/sql/__init__.py) parses this file once. Parameters use %(name)s.

-- name: enqueue
SELECT lonnymq_enqueue_v1(%(queue)s, %(channel)s, %(payload)s::jsonb, %(run_at_ms)s, %(delay_ms)s,
                          %(priority)s, %(dedup_key)s, %(max_attempts)s, %(priority_step_ms)s,
                          %(tolerance_ms)s)

-- name: enqueue_many
SELECT lonnymq_enqueue_many_v1(%(queue)s, %(channels)s::text[], %(payloads)s::jsonb[],
                               %(run_at_ms)s::bigint[], %(delay_ms)s::bigint[], %(priorities)s::integer[],
                               %(dedup_keys)s::text[], %(max_attempts)s::integer[],
                               %(default_max_attempts)s, %(priority_step_ms)s, %(tolerance_ms)s)

-- name: dequeue
SELECT id, channel, payload, attempts, max_attempts, priority, dedup_key, enqueued_at,
       lease_token, lease_until
  FROM lonnymq_dequeue_v1(%(queue)s, %(batch_size)s, %(lease_ms)s, %(worker)s, %(tolerance_ms)s)

-- name: next_due
SELECT lonnymq_next_due_v1(%(queues)s::text[]) - lonnymq_now_ms_v1()

-- name: ack
SELECT lonnymq_ack_v1(%(ids)s::bigint[], %(tokens)s::uuid[])

-- name: fail
SELECT lonnymq_fail_v1(%(id)s, %(token)s::uuid, %(error)s, %(retry_delay_ms)s, %(discard)s,
                       %(backoff_base_ms)s, %(backoff_max_ms)s, %(tolerance_ms)s)

-- name: extend
SELECT lonnymq_extend_v1(%(ids)s::bigint[], %(tokens)s::uuid[], %(lease_ms)s)

-- name: release
SELECT lonnymq_release_v1(%(ids)s::bigint[], %(tokens)s::uuid[], %(tolerance_ms)s)

-- name: reap
SELECT lonnymq_reap_v1(%(limit)s, %(dedup_window_ms)s, %(tolerance_ms)s)

-- name: requeue_dead
SELECT lonnymq_requeue_dead_v1(%(ids)s::bigint[], %(reset_attempts)s, %(tolerance_ms)s)

-- name: cancel
SELECT lonnymq_cancel_v1(%(ids)s::bigint[])

-- name: run_now
SELECT lonnymq_run_now_v1(%(ids)s::bigint[], %(tolerance_ms)s)

-- name: purge_channel
SELECT lonnymq_purge_channel_v1(%(channel_id)s)

-- name: configure_channel
SELECT lonnymq_configure_channel_v1(%(queue)s, %(channel)s, %(max_concurrency)s,
                                    %(release_interval_ms)s, %(paused)s)

-- name: check
SELECT channel_id, queue, channel, problem, detail FROM lonnymq_check_v1(%(grace_ms)s)
 ORDER BY channel_id, problem

-- name: listen
LISTEN lonnymq_wakeup

-- name: pending
-- Burst workers stop when their queues hold nothing ready now and nothing in flight.
SELECT EXISTS (
           SELECT 1 FROM lonnymq_channel c
            WHERE c.queue = ANY (%(queues)s::text[]) AND NOT c.paused
              AND EXISTS (SELECT 1 FROM lonnymq_message m
                           WHERE m.channel_id = c.id AND m.lease_until IS NULL
                             AND m.dequeue_at <= lonnymq_now_ms_v1()))
       OR EXISTS (
           SELECT 1 FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
            WHERE m.lease_until IS NOT NULL AND c.queue = ANY (%(queues)s::text[]))
