-- django-lonnymq 0007: paused is a state of its own. Messages waiting in a paused channel
-- count as paused, never as ready or scheduled, and never as the oldest ready
-- (lonnymq_queue_stats_v2, lonnymq_record_samples_v2; samples gain a paused column).
-- lonnymq_queue_stats_v1 keeps its meaning for code of the release before (paused 0).

-- Functions created here pin the app's schema (SET search_path FROM CURRENT).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

ALTER TABLE lonnymq_queue_sample
    ADD COLUMN paused bigint NOT NULL DEFAULT 0
        CONSTRAINT lonnymq_queue_sample_paused_nonnegative CHECK (paused >= 0);

-- Kept for code of a release before paused became a state of its own (a rolling deploy): a
-- paused channel's messages count as ready or scheduled, paused is 0. Use _v2.
-- Exact figures per queue (all queues when p_queues is NULL), as sample rows with id NULL.
-- Cost: ready/scheduled walk the ready index (channel_id, dequeue_at, id) once per channel,
-- i.e. one index entry per waiting message of the queue (index-only when the visibility
-- map allows); in_flight walks the lease index (messages in flight only); dead walks the
-- (queue, died_at) index. No scan of the message table's heap by channel. released_total
-- is the sum of the channel rows' counters (read with the channel rows, no extra walk).
CREATE OR REPLACE FUNCTION lonnymq_queue_stats_v1(p_queues text[] DEFAULT NULL)
RETURNS SETOF lonnymq_queue_sample
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    WITH now_ms AS (
        SELECT lonnymq_now_ms_v1() AS v
    ), ch AS (
        SELECT c.id, c.queue, c.paused, c.released_total FROM lonnymq_channel c
         WHERE p_queues IS NULL OR c.queue = ANY (p_queues)
    ), waiting AS (
        SELECT ch.queue, pg_catalog.count(*) AS channels, pg_catalog.count(*) FILTER (WHERE ch.paused) AS paused_channels,
               pg_catalog.sum(w.ready) AS ready, pg_catalog.sum(w.scheduled) AS scheduled, pg_catalog.min(w.head) AS head,
               pg_catalog.sum(ch.released_total) AS released_total
          FROM ch CROSS JOIN now_ms
          CROSS JOIN LATERAL (
              SELECT pg_catalog.count(*) FILTER (WHERE m.dequeue_at <= now_ms.v) AS ready,
                     pg_catalog.count(*) FILTER (WHERE m.dequeue_at > now_ms.v) AS scheduled,
                     pg_catalog.min(m.dequeue_at) AS head
                FROM lonnymq_message m
               WHERE m.channel_id = ch.id AND m.lease_until IS NULL
          ) w
         GROUP BY ch.queue
    ), flying AS (
        SELECT ch.queue, pg_catalog.count(*) AS n
          FROM lonnymq_message m JOIN ch ON ch.id = m.channel_id
         WHERE m.lease_until IS NOT NULL
         GROUP BY ch.queue
    ), dead AS (
        SELECT d.queue, pg_catalog.count(*) AS n FROM lonnymq_dead_message d
         WHERE p_queues IS NULL OR d.queue = ANY (p_queues)
         GROUP BY d.queue
    ), queues AS (
        SELECT waiting.queue FROM waiting UNION SELECT dead.queue FROM dead
    )
    SELECT NULL::bigint, q.queue, pg_catalog.clock_timestamp(),
           coalesce(w.channels, 0), coalesce(w.paused_channels, 0),
           coalesce(w.ready, 0)::bigint, coalesce(w.scheduled, 0)::bigint,
           coalesce(f.n, 0), coalesce(d.n, 0),
           CASE WHEN w.head <= now_ms.v THEN now_ms.v - w.head END,
           coalesce(w.released_total, 0)::bigint, 0::bigint
      FROM queues q CROSS JOIN now_ms
      LEFT JOIN waiting w ON w.queue = q.queue
      LEFT JOIN flying f ON f.queue = q.queue
      LEFT JOIN dead d ON d.queue = q.queue
     ORDER BY q.queue
$$;

-- Exact figures per queue (all queues when p_queues is NULL), as sample rows with id NULL.
-- A paused channel's waiting messages count as paused only: never ready, never scheduled,
-- and never the oldest ready (an operator who pauses a tenant is not alerted by its wait).
-- Cost as _v1: one walk of each channel's ready-index range, the lease index, and the
-- (queue, died_at) index.
CREATE FUNCTION lonnymq_queue_stats_v2(p_queues text[] DEFAULT NULL)
RETURNS SETOF lonnymq_queue_sample
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    WITH now_ms AS (
        SELECT lonnymq_now_ms_v1() AS v
    ), ch AS (
        SELECT c.id, c.queue, c.paused, c.released_total FROM lonnymq_channel c
         WHERE p_queues IS NULL OR c.queue = ANY (p_queues)
    ), waiting AS (
        SELECT ch.queue, pg_catalog.count(*) AS channels, pg_catalog.count(*) FILTER (WHERE ch.paused) AS paused_channels,
               pg_catalog.sum(w.ready) FILTER (WHERE NOT ch.paused) AS ready,
               pg_catalog.sum(w.scheduled) FILTER (WHERE NOT ch.paused) AS scheduled,
               pg_catalog.sum(w.ready + w.scheduled) FILTER (WHERE ch.paused) AS paused,
               pg_catalog.min(w.head) FILTER (WHERE NOT ch.paused) AS head,
               pg_catalog.sum(ch.released_total) AS released_total
          FROM ch CROSS JOIN now_ms
          CROSS JOIN LATERAL (
              SELECT pg_catalog.count(*) FILTER (WHERE m.dequeue_at <= now_ms.v) AS ready,
                     pg_catalog.count(*) FILTER (WHERE m.dequeue_at > now_ms.v) AS scheduled,
                     pg_catalog.min(m.dequeue_at) AS head
                FROM lonnymq_message m
               WHERE m.channel_id = ch.id AND m.lease_until IS NULL
          ) w
         GROUP BY ch.queue
    ), flying AS (
        SELECT ch.queue, pg_catalog.count(*) AS n
          FROM lonnymq_message m JOIN ch ON ch.id = m.channel_id
         WHERE m.lease_until IS NOT NULL
         GROUP BY ch.queue
    ), dead AS (
        SELECT d.queue, pg_catalog.count(*) AS n FROM lonnymq_dead_message d
         WHERE p_queues IS NULL OR d.queue = ANY (p_queues)
         GROUP BY d.queue
    ), queues AS (
        SELECT waiting.queue FROM waiting UNION SELECT dead.queue FROM dead
    )
    SELECT NULL::bigint, q.queue, pg_catalog.clock_timestamp(),
           coalesce(w.channels, 0), coalesce(w.paused_channels, 0),
           coalesce(w.ready, 0)::bigint, coalesce(w.scheduled, 0)::bigint,
           coalesce(f.n, 0), coalesce(d.n, 0),
           CASE WHEN w.head <= now_ms.v THEN now_ms.v - w.head END,
           coalesce(w.released_total, 0)::bigint, coalesce(w.paused, 0)::bigint
      FROM queues q CROSS JOIN now_ms
      LEFT JOIN waiting w ON w.queue = q.queue
      LEFT JOIN flying f ON f.queue = q.queue
      LEFT JOIN dead d ON d.queue = q.queue
     ORDER BY q.queue
$$;

-- Record one sample per queue now (lonnymq_queue_stats_v2's figures: paused apart) and drop
-- samples older than p_keep_ms. Returns the rows recorded.
CREATE FUNCTION lonnymq_record_samples_v2(p_keep_ms bigint DEFAULT 86400000)
RETURNS SETOF lonnymq_queue_sample
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM lonnymq_check_range_v1('keep', p_keep_ms, 1::bigint, 31622400000::bigint, false);
    DELETE FROM lonnymq_queue_sample s
     WHERE s.at < pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => p_keep_ms::double precision / 1000::double precision);
    RETURN QUERY
        INSERT INTO lonnymq_queue_sample (queue, at, channels, paused_channels, ready, scheduled,
                                          in_flight, dead, oldest_ready_ms, released_total, paused)
        SELECT x.queue, x.at, x.channels, x.paused_channels, x.ready, x.scheduled,
               x.in_flight, x.dead, x.oldest_ready_ms, x.released_total, x.paused
          FROM lonnymq_queue_stats_v2(NULL::text[]) x
        RETURNING *;
END
$$;
