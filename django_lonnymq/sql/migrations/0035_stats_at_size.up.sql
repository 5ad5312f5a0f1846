-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0035: operators' figures whose work does not grow with the backlog
-- (lonnymq_stats, /metrics, the dashboard, the workers' samples; docs/admin.md, "Figures
-- at size").
-- - lonnymq_queue_stats_v3 (new): lonnymq_queue_stats_v2's figures, exact up to p_cap
--   waiting messages (and dead letters) per queue and estimated past it from a sample of
--   the table's pages, with an `estimated` column saying which.
-- - lonnymq_record_samples_v3 and lonnymq_record_samples_due_v2 (new): the samples, from
--   lonnymq_queue_stats_v3's figures.
-- The v2/v1 functions stay as they were, for the code of the previous release
-- (superseded.sql).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- Figures per queue (all queues when p_queues is NULL), exact up to p_cap waiting messages
-- and estimated past it: `estimated` is true for a queue with more than p_cap waiting
-- messages or dead letters, or more than p_cap / 10 channels (its counts then come from a
-- sample, which is the whole table when the table has no more pages than the sample reads).
-- A paused channel's waiting messages count as paused only: never ready, never scheduled,
-- and never the oldest ready.
-- Cost, bounded whatever the backlog (docs/admin.md, "Figures at size"); K below is
-- GREATEST(p_cap / 100, 100):
-- - waiting messages (ready, scheduled, paused): each queue's first p_cap / 10 channels are
--   walked along the ready index (channel_id, dequeue_at, id) until p_cap + 1 entries are
--   read. A queue with at most p_cap / 10 channels and p_cap waiting messages is counted
--   exactly. Past either bound each figure is estimated from a TABLESAMPLE SYSTEM of about
--   K pages of the message table, scaled by the table's current size (pg_relation_size),
--   and is never less than what the walk counted. SYSTEM sampling reads whole pages, so a
--   queue that holds a small share of a large table, in few pages, is estimated roughly.
--   The sampled rows are told apart by their channel: with one estimated queue, by the few
--   channels that are not its own unpaused ones.
-- - oldest ready: exact for a queue counted exactly (the walk reads every channel's first
--   entry). An estimated queue: the oldest first entry of the K channels next in turn (the
--   eligible index) and of the K at their concurrency cap with the earliest turn, the
--   channels a backlog has kept waiting longest, without one probe per channel; a channel
--   waiting for its rate limit may hold an older ready message.
-- - in flight: exact, along the lease index (messages in flight only).
-- - dead: counted along the (queue, died_at) index up to p_cap + 1; past it estimated from a
--   sample of the dead-letter table in the same way (never less than p_cap + 1).
-- - channels, paused channels, released_total: exact, from the channel rows, plus
--   lonnymq_release_count and the pruned channels' releases (lonnymq_queue_released), so
--   released_total never falls when a channel is pruned; a queue whose channels were all
--   pruned keeps its row.
CREATE FUNCTION lonnymq_queue_stats_v3(p_queues text[] DEFAULT NULL, p_cap bigint DEFAULT 100000)
RETURNS TABLE (id bigint, queue text, at timestamptz, channels bigint, paused_channels bigint,
               ready bigint, scheduled bigint, in_flight bigint, dead bigint, oldest_ready_ms bigint,
               released_total bigint, paused bigint, estimated boolean)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
-- The planner prices the bounded walks as if they read every channel's range: JIT compiling
-- a statement for that took a second at 100,000 channels, and a parallel plan ran the sample
-- once per worker.
SET jit = off
SET max_parallel_workers_per_gather = 0
AS $$
#variable_conflict use_column
DECLARE
    v_now bigint;
    v_heads bigint;
    v_max_channels bigint;
    v_pct double precision := 100;
    v_dead_pct double precision := 100;
    -- One entry per queue that has channels, in queue order.
    v_queues text[];
    v_channels bigint[];
    v_paused_channels bigint[];
    v_released numeric[];
    v_walked bigint[];
    v_ready bigint[];
    v_scheduled bigint[];
    v_paused bigint[];
    v_head bigint[];
    v_big text[];
    -- Queues past the bounds: their sampled counts, unscaled.
    v_s_queues text[];
    v_s_ready bigint[];
    v_s_scheduled bigint[];
    v_s_paused bigint[];
    v_dead_queues text[];
    v_big_dead text[];
BEGIN
    PERFORM lonnymq_check_range_v1('cap', p_cap, 1::bigint, 1000000000::bigint, false);
    v_now := lonnymq_now_ms_v1();
    v_heads := GREATEST(p_cap / 100, 100);
    v_max_channels := GREATEST(p_cap / 10, 1);
    -- Each queue's channel rows, and its walk: the first p_cap + 1 waiting messages of its
    -- first v_max_channels channels (all of them when the queue is within both bounds).
    SELECT pg_catalog.array_agg(q.queue ORDER BY q.queue), pg_catalog.array_agg(q.channels ORDER BY q.queue),
           pg_catalog.array_agg(q.paused_channels ORDER BY q.queue),
           pg_catalog.array_agg(q.released_total + coalesce(
               (SELECT pg_catalog.sum(rc.released) FROM lonnymq_release_count rc
                  JOIN lonnymq_channel c ON c.id = rc.channel_id WHERE c.queue = q.queue), 0::numeric) ORDER BY q.queue),
           pg_catalog.array_agg(w.n ORDER BY q.queue), pg_catalog.array_agg(w.ready ORDER BY q.queue),
           pg_catalog.array_agg(w.scheduled ORDER BY q.queue), pg_catalog.array_agg(w.paused ORDER BY q.queue),
           pg_catalog.array_agg(w.head ORDER BY q.queue),
           pg_catalog.array_agg(q.queue) FILTER (WHERE q.channels > v_max_channels OR w.n > p_cap)
      INTO v_queues, v_channels, v_paused_channels, v_released, v_walked, v_ready, v_scheduled, v_paused,
           v_head, v_big
      FROM (SELECT c.queue, pg_catalog.count(*) AS channels, pg_catalog.count(*) FILTER (WHERE c.paused) AS paused_channels,
                   pg_catalog.sum(c.released_total) AS released_total
              FROM lonnymq_channel c
             WHERE p_queues IS NULL OR c.queue = ANY (p_queues)
             GROUP BY c.queue) q
     CROSS JOIN LATERAL (
          SELECT pg_catalog.count(*) AS n,
                 pg_catalog.count(*) FILTER (WHERE NOT x.paused AND x.dequeue_at <= v_now) AS ready,
                 pg_catalog.count(*) FILTER (WHERE NOT x.paused AND x.dequeue_at > v_now) AS scheduled,
                 pg_catalog.count(*) FILTER (WHERE x.paused) AS paused,
                 pg_catalog.min(x.dequeue_at) FILTER (WHERE NOT x.paused) AS head
            FROM (SELECT c.paused, r.dequeue_at
                    FROM (SELECT c0.id, c0.paused FROM lonnymq_channel c0
                           WHERE c0.queue = q.queue LIMIT v_max_channels) c
                   CROSS JOIN LATERAL (SELECT m.dequeue_at FROM lonnymq_message m
                                        WHERE m.channel_id = c.id AND m.lease_until IS NULL
                                        -- In index order: a scan that stops at the limit (a
                                        -- bitmap scan would read the whole channel first).
                                        ORDER BY m.dequeue_at, m.id LIMIT p_cap + 1) r
                   LIMIT p_cap + 1) x
      ) w;
    IF v_big IS NOT NULL THEN
        -- A sample of about v_heads pages, of the table's size now (not the planner's last look).
        v_pct := LEAST(100::double precision,
                       100::double precision * v_heads::double precision
                       / GREATEST(pg_catalog.pg_relation_size('lonnymq_message'::regclass)::double precision
                                  / pg_catalog.current_setting('block_size')::double precision, 1::double precision));
        IF pg_catalog.cardinality(v_big) = 1 THEN
            -- One estimated queue (the usual case): a sampled row whose channel is not one of
            -- the other queues' or a paused one is in an unpaused channel of that queue, so
            -- only those few channels are hashed.
            SELECT ARRAY[v_big[1]],
                   ARRAY[pg_catalog.count(*) FILTER (WHERE x.id IS NULL AND m.dequeue_at <= v_now)],
                   ARRAY[pg_catalog.count(*) FILTER (WHERE x.id IS NULL AND m.dequeue_at > v_now)],
                   ARRAY[pg_catalog.count(*) FILTER (WHERE x.queue = v_big[1])]
              INTO v_s_queues, v_s_ready, v_s_scheduled, v_s_paused
              FROM lonnymq_message m TABLESAMPLE SYSTEM (v_pct)
              LEFT JOIN (SELECT c.id, c.queue FROM lonnymq_channel c
                          WHERE c.queue <> v_big[1] OR c.paused) x ON x.id = m.channel_id
             WHERE m.lease_until IS NULL;
        ELSE
            SELECT pg_catalog.array_agg(s.queue), pg_catalog.array_agg(s.ready), pg_catalog.array_agg(s.scheduled),
                   pg_catalog.array_agg(s.paused)
              INTO v_s_queues, v_s_ready, v_s_scheduled, v_s_paused
              FROM (SELECT c.queue,
                           pg_catalog.count(*) FILTER (WHERE NOT c.paused AND m.dequeue_at <= v_now) AS ready,
                           pg_catalog.count(*) FILTER (WHERE NOT c.paused AND m.dequeue_at > v_now) AS scheduled,
                           pg_catalog.count(*) FILTER (WHERE c.paused) AS paused
                      FROM lonnymq_message m TABLESAMPLE SYSTEM (v_pct)
                      JOIN lonnymq_channel c ON c.id = m.channel_id
                     WHERE m.lease_until IS NULL AND c.queue = ANY (v_big)
                     GROUP BY c.queue) s;
        END IF;
    END IF;
    -- Queues with dead letters (a skip scan of the (queue, died_at) index), and those with
    -- more than p_cap of them.
    WITH RECURSIVE dq AS (
        SELECT (SELECT pg_catalog.min(d.queue) FROM lonnymq_dead_message d
                 WHERE p_queues IS NULL OR d.queue = ANY (p_queues)) AS queue
        UNION ALL
        SELECT (SELECT pg_catalog.min(d.queue) FROM lonnymq_dead_message d
                 WHERE d.queue > dq.queue AND (p_queues IS NULL OR d.queue = ANY (p_queues)))
          FROM dq WHERE dq.queue IS NOT NULL
    )
    SELECT pg_catalog.array_agg(dq.queue),
           pg_catalog.array_agg(dq.queue) FILTER (
               WHERE (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM lonnymq_dead_message d WHERE d.queue = dq.queue
                                                       LIMIT p_cap + 1) x) > p_cap)
      INTO v_dead_queues, v_big_dead
      FROM dq
     WHERE dq.queue IS NOT NULL;
    IF v_big_dead IS NOT NULL THEN
        v_dead_pct := LEAST(100::double precision,
                            100::double precision * v_heads::double precision
                            / GREATEST(pg_catalog.pg_relation_size('lonnymq_dead_message'::regclass)::double precision
                                       / pg_catalog.current_setting('block_size')::double precision, 1::double precision));
    END IF;
    RETURN QUERY
    WITH per_queue AS (
        SELECT u.queue, u.channels, u.paused_channels, u.released, u.walked, u.ready, u.scheduled, u.paused, u.head,
               u.queue = ANY (coalesce(v_big, '{}'::text[])) AS big
          FROM ROWS FROM (pg_catalog.unnest(v_queues), pg_catalog.unnest(v_channels),
                          pg_catalog.unnest(v_paused_channels), pg_catalog.unnest(v_released),
                          pg_catalog.unnest(v_walked), pg_catalog.unnest(v_ready), pg_catalog.unnest(v_scheduled),
                          pg_catalog.unnest(v_paused), pg_catalog.unnest(v_head))
               AS u(queue, channels, paused_channels, released, walked, ready, scheduled, paused, head)
    ), sampled AS (
        SELECT u.queue, u.ready, u.scheduled, u.paused
          FROM ROWS FROM (pg_catalog.unnest(v_s_queues), pg_catalog.unnest(v_s_ready),
                          pg_catalog.unnest(v_s_scheduled), pg_catalog.unnest(v_s_paused))
               AS u(queue, ready, scheduled, paused)
    ), heads AS (
        -- An estimated queue's oldest waiting message: the first entries of the v_heads
        -- channels next in turn, and of the v_heads at their cap with the earliest turn.
        SELECT b.queue, pg_catalog.min(h.dequeue_at) AS head
          FROM pg_catalog.unnest(v_big) AS b(queue)
         CROSS JOIN LATERAL (
              (SELECT c.id FROM lonnymq_channel c
                WHERE c.queue = b.queue AND c.next_dequeue_at IS NOT NULL AND NOT c.paused
                  AND (c.max_concurrency IS NULL OR c.in_flight < c.max_concurrency)
                ORDER BY c.next_dequeue_at LIMIT v_heads)
              UNION ALL
              (SELECT c.id FROM lonnymq_channel c
                WHERE c.queue = b.queue AND NOT c.paused AND c.in_flight >= c.max_concurrency
                ORDER BY c.next_dequeue_at NULLS LAST LIMIT v_heads)
          ) k
         CROSS JOIN LATERAL (SELECT m.dequeue_at FROM lonnymq_message m
                              WHERE m.channel_id = k.id AND m.lease_until IS NULL
                              ORDER BY m.dequeue_at, m.id LIMIT 1) h
         GROUP BY b.queue
    ), flying AS (
        SELECT c.queue, pg_catalog.count(*) AS n
          FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
         WHERE m.lease_until IS NOT NULL AND (p_queues IS NULL OR c.queue = ANY (p_queues))
         GROUP BY c.queue
    ), dead AS (
        SELECT u.queue, u.queue = ANY (coalesce(v_big_dead, '{}'::text[])) AS big,
               CASE WHEN u.queue = ANY (coalesce(v_big_dead, '{}'::text[]))
                    THEN (SELECT pg_catalog.count(*) FROM lonnymq_dead_message d TABLESAMPLE SYSTEM (v_dead_pct)
                           WHERE d.queue = u.queue)
                    ELSE (SELECT pg_catalog.count(*) FROM lonnymq_dead_message d WHERE d.queue = u.queue) END AS n
          FROM pg_catalog.unnest(v_dead_queues) AS u(queue)
    ), pruned AS (
        SELECT p.queue, p.released FROM lonnymq_queue_released p
         WHERE p_queues IS NULL OR p.queue = ANY (p_queues)
    ), queues AS (
        SELECT per_queue.queue FROM per_queue UNION SELECT dead.queue FROM dead
        UNION SELECT pruned.queue FROM pruned
    )
    SELECT NULL::bigint, q.queue, pg_catalog.clock_timestamp(),
           coalesce(pq.channels, 0), coalesce(pq.paused_channels, 0),
           CASE WHEN pq.big THEN GREATEST(pq.ready, pg_catalog.round(coalesce(s.ready, 0::bigint)::double precision * 100::double precision / v_pct)::bigint)
                ELSE coalesce(pq.ready, 0) END,
           CASE WHEN pq.big THEN GREATEST(pq.scheduled, pg_catalog.round(coalesce(s.scheduled, 0::bigint)::double precision * 100::double precision / v_pct)::bigint)
                ELSE coalesce(pq.scheduled, 0) END,
           coalesce(f.n, 0),
           CASE WHEN d.big THEN GREATEST(p_cap + 1, pg_catalog.round(d.n::double precision * 100::double precision / v_dead_pct)::bigint)
                ELSE coalesce(d.n, 0) END,
           CASE WHEN coalesce(h.head, pq.head) <= v_now THEN v_now - coalesce(h.head, pq.head) END,
           (coalesce(pq.released, 0::numeric) + coalesce(p.released, 0::bigint)::numeric)::bigint,
           CASE WHEN pq.big THEN GREATEST(pq.paused, pg_catalog.round(coalesce(s.paused, 0::bigint)::double precision * 100::double precision / v_pct)::bigint)
                ELSE coalesce(pq.paused, 0) END,
           coalesce(pq.big, false) OR coalesce(d.big, false)
      FROM queues q
      LEFT JOIN per_queue pq ON pq.queue = q.queue
      LEFT JOIN sampled s ON s.queue = q.queue
      LEFT JOIN heads h ON h.queue = q.queue
      LEFT JOIN flying f ON f.queue = q.queue
      LEFT JOIN dead d ON d.queue = q.queue
      LEFT JOIN pruned p ON p.queue = q.queue
     ORDER BY q.queue;
END
$$;

-- Record one sample per queue now (lonnymq_queue_stats_v3's figures, exact up to p_cap and
-- estimated past it: paused apart) and drop samples older than p_keep_ms. Returns the rows
-- recorded, each with `estimated` (not stored: a sample holds the figures only).
CREATE FUNCTION lonnymq_record_samples_v3(p_keep_ms bigint DEFAULT 86400000, p_cap bigint DEFAULT 100000)
RETURNS TABLE (id bigint, queue text, at timestamptz, channels bigint, paused_channels bigint,
               ready bigint, scheduled bigint, in_flight bigint, dead bigint, oldest_ready_ms bigint,
               released_total bigint, paused bigint, estimated boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
BEGIN
    PERFORM lonnymq_check_range_v1('keep', p_keep_ms, 1::bigint, 31622400000::bigint, false);
    DELETE FROM lonnymq_queue_sample s
     WHERE s.at < pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => p_keep_ms::double precision / 1000::double precision);
    RETURN QUERY
        WITH figures AS (
            SELECT * FROM lonnymq_queue_stats_v3(NULL::text[], p_cap)
        ), written AS (
            INSERT INTO lonnymq_queue_sample (queue, at, channels, paused_channels, ready, scheduled,
                                              in_flight, dead, oldest_ready_ms, released_total, paused)
            SELECT x.queue, x.at, x.channels, x.paused_channels, x.ready, x.scheduled,
                   x.in_flight, x.dead, x.oldest_ready_ms, x.released_total, x.paused
              FROM figures x
            RETURNING *
        )
        SELECT w.id, w.queue, w.at, w.channels, w.paused_channels, w.ready, w.scheduled, w.in_flight,
               w.dead, w.oldest_ready_ms, w.released_total, w.paused, x.estimated
          FROM written w JOIN figures x ON x.queue = w.queue
         ORDER BY w.queue;
END
$$;

-- One sample per queue if none was recorded in the last p_interval_ms, by one caller at a
-- time: every worker calls this on its own clock, the first to take the sampler's lock
-- records (lonnymq_record_samples_v3 with p_cap, pruning samples older than p_keep_ms) and
-- the others find the lock taken, or a sample too recent, and record nothing. Any recorder
-- counts (`lonnymq_stats --record` too), so samples are at least p_interval_ms apart.
-- Returns the rows recorded (0: not due, or another caller is recording).
-- The lock: the two-key form with the queue's namespace and key -210, which no channel's key
-- (channel id modulo 2^31-1, never negative) can take (docs/locking.md).
CREATE FUNCTION lonnymq_record_samples_due_v2(p_interval_ms bigint, p_keep_ms bigint, p_cap bigint)
RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_recorded integer;
BEGIN
    PERFORM lonnymq_check_range_v1('interval', p_interval_ms, 1000::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_range_v1('keep', p_keep_ms, 1::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('cap', p_cap, 1::bigint, 1000000000::bigint, false);
    IF NOT pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), -210) THEN
        RETURN 0;
    END IF;
    -- Under the lock, and in a statement that began after the previous holder committed.
    IF EXISTS (SELECT 1 FROM lonnymq_queue_sample s
                WHERE s.at > pg_catalog.clock_timestamp()
                             - pg_catalog.make_interval(secs => p_interval_ms::double precision / 1000::double precision)) THEN
        RETURN 0;
    END IF;
    SELECT pg_catalog.count(*)::integer INTO v_recorded FROM lonnymq_record_samples_v3(p_keep_ms, p_cap);
    RETURN v_recorded;
END
$$;
