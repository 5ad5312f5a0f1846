-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0003: figures for operators (the admin, the dashboard, lonnymq_stats,
-- the metrics view) and a small history of them.
--
-- Nothing here touches the queue's hot path: no trigger, no change to a 0001 function.
-- Every function only reads the queue's tables, except lonnymq_record_samples_v1 (writes
-- the sample table), lonnymq_delete_channel_v1 and lonnymq_purge_dead_v1 (admin actions).

-- ---------------------------------------------------------------------------------------
-- History: one row per queue each time someone records a sample
-- ---------------------------------------------------------------------------------------

-- Written by `manage.py lonnymq_stats --record` (cron, or --interval), pruned by the same
-- call. The dashboard charts these; it never writes them itself.
CREATE TABLE lonnymq_queue_sample (
    id               bigserial   PRIMARY KEY,
    queue            text        NOT NULL,
    at               timestamptz NOT NULL DEFAULT clock_timestamp(),
    channels         bigint      NOT NULL,
    paused_channels  bigint      NOT NULL,
    ready            bigint      NOT NULL,
    scheduled        bigint      NOT NULL,
    in_flight        bigint      NOT NULL,
    dead             bigint      NOT NULL,
    -- How long the most overdue ready message has been due (ms); NULL when none is ready.
    oldest_ready_ms  bigint      NULL,
    -- sum(lonnymq_channel.released_total) of the queue's channels: messages released
    -- (leased) ever, once per delivery. Monotonic per channel; the sum drops only when a
    -- channel is deleted (its count leaves the sum), so readers clamp differences at 0.
    released_total   bigint      NOT NULL DEFAULT 0,
    CONSTRAINT lonnymq_queue_sample_counts_nonnegative
        CHECK (channels >= 0 AND paused_channels >= 0 AND ready >= 0 AND scheduled >= 0
               AND in_flight >= 0 AND dead >= 0 AND released_total >= 0)
);
CREATE INDEX lonnymq_sample_queue_at_idx ON lonnymq_queue_sample (queue, at);
CREATE INDEX lonnymq_queue_sample_at_idx ON lonnymq_queue_sample (at);

-- ---------------------------------------------------------------------------------------
-- Live figures
-- ---------------------------------------------------------------------------------------

-- Exact figures per queue (all queues when p_queues is NULL), as sample rows with id NULL.
-- Cost: ready/scheduled walk the ready index (channel_id, dequeue_at, id) once per channel,
-- i.e. one index entry per waiting message of the queue (index-only when the visibility
-- map allows); in_flight walks the lease index (messages in flight only); dead walks the
-- (queue, died_at) index. No scan of the message table's heap by channel. released_total
-- is the sum of the channel rows' counters (read with the channel rows, no extra walk).
CREATE FUNCTION lonnymq_queue_stats_v1(p_queues text[] DEFAULT NULL)
RETURNS SETOF lonnymq_queue_sample
LANGUAGE sql VOLATILE AS $$
    WITH now_ms AS (
        SELECT lonnymq_now_ms_v1() AS v
    ), ch AS (
        SELECT c.id, c.queue, c.paused, c.released_total FROM lonnymq_channel c
         WHERE p_queues IS NULL OR c.queue = ANY (p_queues)
    ), waiting AS (
        SELECT ch.queue, count(*) AS channels, count(*) FILTER (WHERE ch.paused) AS paused_channels,
               sum(w.ready) AS ready, sum(w.scheduled) AS scheduled, min(w.head) AS head,
               sum(ch.released_total) AS released_total
          FROM ch CROSS JOIN now_ms
          CROSS JOIN LATERAL (
              SELECT count(*) FILTER (WHERE m.dequeue_at <= now_ms.v) AS ready,
                     count(*) FILTER (WHERE m.dequeue_at > now_ms.v) AS scheduled,
                     min(m.dequeue_at) AS head
                FROM lonnymq_message m
               WHERE m.channel_id = ch.id AND m.lease_until IS NULL
          ) w
         GROUP BY ch.queue
    ), flying AS (
        SELECT ch.queue, count(*) AS n
          FROM lonnymq_message m JOIN ch ON ch.id = m.channel_id
         WHERE m.lease_until IS NOT NULL
         GROUP BY ch.queue
    ), dead AS (
        SELECT d.queue, count(*) AS n FROM lonnymq_dead_message d
         WHERE p_queues IS NULL OR d.queue = ANY (p_queues)
         GROUP BY d.queue
    ), queues AS (
        SELECT waiting.queue FROM waiting UNION SELECT dead.queue FROM dead
    )
    SELECT NULL::bigint, q.queue, clock_timestamp(),
           coalesce(w.channels, 0), coalesce(w.paused_channels, 0),
           coalesce(w.ready, 0)::bigint, coalesce(w.scheduled, 0)::bigint,
           coalesce(f.n, 0), coalesce(d.n, 0),
           CASE WHEN w.head <= now_ms.v THEN now_ms.v - w.head END,
           coalesce(w.released_total, 0)::bigint
      FROM queues q CROSS JOIN now_ms
      LEFT JOIN waiting w ON w.queue = q.queue
      LEFT JOIN flying f ON f.queue = q.queue
      LEFT JOIN dead d ON d.queue = q.queue
     ORDER BY q.queue
$$;

-- Ready, scheduled and in-flight counts of a few channels (one admin changelist page).
-- ready and scheduled are exact up to p_cap and stop counting there (each is one bounded
-- range of the ready index); in_flight walks the lease index, whose size is the number of
-- messages in flight in the whole database (bounded by the workers' capacity).
CREATE FUNCTION lonnymq_channel_counts_v1(p_ids bigint[], p_cap integer DEFAULT 10000)
RETURNS TABLE (channel_id bigint, ready bigint, scheduled bigint, in_flight bigint)
LANGUAGE sql VOLATILE AS $$
    WITH now_ms AS (
        SELECT lonnymq_now_ms_v1() AS v
    ), flying AS (
        SELECT m.channel_id, count(*) AS n FROM lonnymq_message m
         WHERE m.lease_until IS NOT NULL AND m.channel_id = ANY (p_ids)
         GROUP BY m.channel_id
    )
    SELECT p.id,
           (SELECT count(*) FROM (SELECT 1 FROM lonnymq_message m
                                   WHERE m.channel_id = p.id AND m.lease_until IS NULL
                                     AND m.dequeue_at <= now_ms.v
                                   LIMIT p_cap) r),
           (SELECT count(*) FROM (SELECT 1 FROM lonnymq_message m
                                   WHERE m.channel_id = p.id AND m.lease_until IS NULL
                                     AND m.dequeue_at > now_ms.v
                                   LIMIT p_cap) s),
           coalesce(f.n, 0)
      FROM unnest(p_ids) AS p(id) CROSS JOIN now_ms
      LEFT JOIN flying f ON f.channel_id = p.id
$$;

-- Planner's row estimate of a table (pg_class.reltuples): -1 when never analyzed.
CREATE FUNCTION lonnymq_estimated_rows_v1(p_table regclass) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT c.reltuples::bigint FROM pg_class c WHERE c.oid = p_table
$$;

-- ---------------------------------------------------------------------------------------
-- Writes
-- ---------------------------------------------------------------------------------------

-- Record one sample per queue now (its figures and the running sum of released_total) and
-- drop samples older than p_keep_ms. Returns the rows recorded.
CREATE FUNCTION lonnymq_record_samples_v1(p_keep_ms bigint DEFAULT 86400000)
RETURNS SETOF lonnymq_queue_sample
LANGUAGE plpgsql AS $$
BEGIN
    IF p_keep_ms IS NULL OR p_keep_ms < 1 THEN
        PERFORM lonnymq_raise_invalid_v1('keep', 'must be positive', p_keep_ms::text);
    END IF;
    DELETE FROM lonnymq_queue_sample s
     WHERE s.at < clock_timestamp() - make_interval(secs => p_keep_ms / 1000.0);
    RETURN QUERY
        INSERT INTO lonnymq_queue_sample (queue, at, channels, paused_channels, ready, scheduled,
                                          in_flight, dead, oldest_ready_ms, released_total)
        SELECT x.queue, x.at, x.channels, x.paused_channels, x.ready, x.scheduled,
               x.in_flight, x.dead, x.oldest_ready_ms, x.released_total
          FROM lonnymq_queue_stats_v1(NULL) x
        RETURNING *;
END
$$;

-- REPLACED by migration 0004: not the live body (see ../schema.sql).
-- Delete a channel only while it holds no message and no enqueue into it is in flight.
-- Returns 'deleted', 'not_empty', 'busy' (a producer or dequeuer holds it: try again) or
-- 'missing'. Dead messages keep their queue and channel names (requeue recreates the
-- channel). The foreign-key check of the delete scans lonnymq_message (no index leads with
-- channel_id for every row); deleting a channel is rare, so the schema does not pay for one.
CREATE FUNCTION lonnymq_delete_channel_v1(p_id bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM 1 FROM lonnymq_channel c WHERE c.id = p_id;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    SELECT c.id INTO v_id FROM lonnymq_channel c WHERE c.id = p_id FOR UPDATE SKIP LOCKED;
    IF v_id IS NULL
       OR NOT pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(p_id)) THEN
        RETURN 'busy';
    END IF;
    IF EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.channel_id = p_id AND m.lease_until IS NULL)
       OR EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.lease_until IS NOT NULL AND m.channel_id = p_id) THEN
        RETURN 'not_empty';
    END IF;
    DELETE FROM lonnymq_channel c WHERE c.id = p_id;
    RETURN 'deleted';
END
$$;

-- Delete dead messages for good. Returns the ids deleted.
CREATE FUNCTION lonnymq_purge_dead_v1(p_ids bigint[]) RETURNS bigint[]
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM lonnymq_dead_message d WHERE d.id = ANY (p_ids) RETURNING d.id
    )
    SELECT coalesce(array_agg(gone.id ORDER BY gone.id), ARRAY[]::bigint[]) FROM gone
$$;
