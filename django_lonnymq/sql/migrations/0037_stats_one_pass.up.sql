-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0037: lonnymq_queue_stats_v2 (same name, arguments and result) counts the
-- waiting messages of every queue in one pass over the message table, grouped by channel,
-- where it looked them up channel by channel. The workers record the dashboard's samples
-- through it once a minute: at 3,000,000 messages over 100,000 channels that took 3,200,000
-- buffer visits in random heap order (5-11 s of a core, and the shared buffers a drain
-- needs), and the drain of 4 workers fell to about half the rate of 1,000 channels
-- (docs/performance.md, "At scale"). A call for named queues still looks up their channels.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

CREATE OR REPLACE FUNCTION lonnymq_queue_stats_v2(p_queues text[] DEFAULT NULL)
RETURNS SETOF lonnymq_queue_sample
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    WITH now_ms AS (
        SELECT lonnymq_now_ms_v1() AS v
    ), ch AS (
        SELECT c.id, c.queue, c.paused, c.released_total + coalesce(r.n, 0::bigint) AS released_total
          FROM lonnymq_channel c
          LEFT JOIN (SELECT rc.channel_id, pg_catalog.sum(rc.released)::bigint AS n FROM lonnymq_release_count rc
                      GROUP BY rc.channel_id) r ON r.channel_id = c.id
         WHERE p_queues IS NULL OR c.queue = ANY (p_queues)
    ), per_channel AS (
        -- Every queue: one pass over the waiting messages, grouped by channel. Looked up
        -- channel by channel (as below), 3,000,000 messages over 100,000 channels took
        -- 6,000,000 buffer visits in random heap order (11.5 s), and evicted the drain's
        -- pages from shared_buffers; a sequential scan reads the heap once through a
        -- small ring of buffers.
        SELECT m.channel_id,
               pg_catalog.count(*) FILTER (WHERE m.dequeue_at <= now_ms.v) AS ready,
               pg_catalog.count(*) FILTER (WHERE m.dequeue_at > now_ms.v) AS scheduled,
               pg_catalog.min(m.dequeue_at) AS head
          FROM lonnymq_message m CROSS JOIN now_ms
         WHERE p_queues IS NULL AND m.lease_until IS NULL
         GROUP BY m.channel_id
    ), waiting_all AS (
        SELECT ch.id, ch.queue, ch.paused, ch.released_total,
               coalesce(w.ready, 0::bigint) AS ready, coalesce(w.scheduled, 0::bigint) AS scheduled, w.head
          FROM ch LEFT JOIN per_channel w ON w.channel_id = ch.id
         WHERE p_queues IS NULL
    ), waiting_some AS (
        -- A few queues: their channels' messages only, channel by channel.
        SELECT ch.id, ch.queue, ch.paused, ch.released_total, w.ready, w.scheduled, w.head
          FROM ch CROSS JOIN now_ms
          CROSS JOIN LATERAL (
              SELECT pg_catalog.count(*) FILTER (WHERE m.dequeue_at <= now_ms.v) AS ready,
                     pg_catalog.count(*) FILTER (WHERE m.dequeue_at > now_ms.v) AS scheduled,
                     pg_catalog.min(m.dequeue_at) AS head
                FROM lonnymq_message m
               WHERE m.channel_id = ch.id AND m.lease_until IS NULL
          ) w
         WHERE p_queues IS NOT NULL
    ), waiting AS (
        SELECT x.queue, pg_catalog.count(*) AS channels, pg_catalog.count(*) FILTER (WHERE x.paused) AS paused_channels,
               pg_catalog.sum(x.ready) FILTER (WHERE NOT x.paused) AS ready,
               pg_catalog.sum(x.scheduled) FILTER (WHERE NOT x.paused) AS scheduled,
               pg_catalog.sum(x.ready + x.scheduled) FILTER (WHERE x.paused) AS paused,
               pg_catalog.min(x.head) FILTER (WHERE NOT x.paused) AS head,
               pg_catalog.sum(x.released_total) AS released_total
          FROM (SELECT * FROM waiting_all UNION ALL SELECT * FROM waiting_some) x
         GROUP BY x.queue
    ), flying AS (
        SELECT ch.queue, pg_catalog.count(*) AS n
          FROM lonnymq_message m JOIN ch ON ch.id = m.channel_id
         WHERE m.lease_until IS NOT NULL
         GROUP BY ch.queue
    ), dead AS (
        SELECT d.queue, pg_catalog.count(*) AS n FROM lonnymq_dead_message d
         WHERE p_queues IS NULL OR d.queue = ANY (p_queues)
         GROUP BY d.queue
    ), pruned AS (
        SELECT p.queue, p.released FROM lonnymq_queue_released p
         WHERE p_queues IS NULL OR p.queue = ANY (p_queues)
    ), queues AS (
        SELECT waiting.queue FROM waiting UNION SELECT dead.queue FROM dead
        UNION SELECT pruned.queue FROM pruned
    )
    SELECT NULL::bigint, q.queue, pg_catalog.clock_timestamp(),
           coalesce(w.channels, 0), coalesce(w.paused_channels, 0),
           coalesce(w.ready, 0)::bigint, coalesce(w.scheduled, 0)::bigint,
           coalesce(f.n, 0), coalesce(d.n, 0),
           CASE WHEN w.head <= now_ms.v THEN now_ms.v - w.head END,
           (coalesce(w.released_total, 0::numeric) + coalesce(p.released, 0::bigint)::numeric)::bigint,
           coalesce(w.paused, 0)::bigint
      FROM queues q CROSS JOIN now_ms
      LEFT JOIN waiting w ON w.queue = q.queue
      LEFT JOIN flying f ON f.queue = q.queue
      LEFT JOIN dead d ON d.queue = q.queue
      LEFT JOIN pruned p ON p.queue = q.queue
     ORDER BY q.queue
$$;
