-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0028: channels that come and go (LONNYMQ_CHANNEL_IDLE_PRUNE).
-- - lonnymq_message_channel_idx (new): every message of a channel, so deleting a channel
--   row (its foreign-key check) is one index probe, not a scan of the message table.
-- - lonnymq_queue_released (new): releases of a queue's pruned channels.
-- - lonnymq_channel_configured_v1 (new): what a user set on a channel that pruning would lose.
-- - lonnymq_prune_channels_v1 (new): delete idle, empty, unconfigured channels in a batch.
-- - lonnymq_queue_stats_v2 (same contract): released_total adds the pruned channels' releases.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- Every message of a channel, whatever its state: the foreign key's check when a channel row
-- is deleted (pruned, or delete_channel) probes this instead of scanning the whole table.
CREATE INDEX lonnymq_message_channel_idx ON lonnymq_message (channel_id);

-- Releases of channels that were pruned (lonnymq_prune_channels_v1), per queue: a queue's
-- released_total (lonnymq_queue_stats_v2) adds this row, so pruning never makes it fall.
CREATE TABLE lonnymq_queue_released (
    queue     text   PRIMARY KEY,
    released  bigint NOT NULL,
    CONSTRAINT lonnymq_queue_released_nonnegative CHECK (released >= 0)
);

-- Whether a user set something on this channel that pruning would lose: a concurrency cap,
-- a release interval, a weight, a token bucket, a pause, a plan. The one place that says what
-- "configured" means: a new per-channel setting adds its test here.
CREATE FUNCTION lonnymq_channel_configured_v1(c lonnymq_channel) RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT c.max_concurrency IS NOT NULL
        OR c.release_interval_ms <> 0::bigint
        OR c.weight <> 1
        OR c.rate_count IS NOT NULL
        OR c.paused
        OR c.plan_id IS NOT NULL
$$;
-- Delete up to p_limit channels (each holds an advisory lock until the statement ends, from
-- the server's shared lock table: the workers ask for 200) that nobody configured (lonnymq_channel_configured_v1), that
-- hold no message in any state and no dedup key, and that were neither created nor released
-- from in the last p_idle_ms (LONNYMQ_CHANNEL_IDLE_PRUNE; the workers' housekeeping calls
-- this). Their wake-up marks and release counts go with them; their releases are added to
-- lonnymq_queue_released. Returns how many it deleted. Never waits for a producer or a
-- dequeuer: a channel one of them holds is skipped, for a later call.
-- Candidates are parked channels (next_dequeue_at NULL: a dequeue found them empty, or they
-- are new): a cheap test that spares the probes of the message table for every channel with
-- a backlog (a channel with a turn is pruned once a dequeue has parked it).
-- Locking (docs/locking.md, "Pruning a channel"): 1. the candidates' rows FOR UPDATE SKIP
-- LOCKED (a producer with an uncommitted message holds KEY SHARE on its channel, dequeuers
-- and configure hold NO KEY UPDATE: all skipped), then each one's exclusive advisory lock,
-- tried (a producer between its lookup and its insert holds it shared: skipped); 2. in a new
-- statement (a snapshot taken after both locks), the delete tests emptiness again, so a
-- message committed after the first statement's snapshot keeps its channel.
CREATE FUNCTION lonnymq_prune_channels_v1(p_idle_ms bigint, p_limit integer DEFAULT 200)
RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_cutoff_ms bigint;
    v_cutoff_at timestamptz;
    v_locked    bigint[];
    v_gone      integer;
BEGIN
    PERFORM lonnymq_check_range_v1('idle', p_idle_ms, 1::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('limit', p_limit::bigint, 1::bigint, 10000::bigint, false);
    v_cutoff_ms := lonnymq_now_ms_v1() - p_idle_ms;
    v_cutoff_at := pg_catalog.clock_timestamp()
                   - pg_catalog.make_interval(secs => p_idle_ms::double precision / 1000::double precision);

    SELECT pg_catalog.array_agg(k.id ORDER BY k.id) INTO v_locked
      FROM (SELECT c.id FROM lonnymq_channel c
             WHERE c.next_dequeue_at IS NULL
               AND c.created_at < v_cutoff_at
               AND (c.last_dequeue_at IS NULL OR c.last_dequeue_at < v_cutoff_ms)
               AND NOT lonnymq_channel_configured_v1(c)
               AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.channel_id = c.id)
               AND NOT EXISTS (SELECT 1 FROM lonnymq_dedup d WHERE d.channel_id = c.id)
             LIMIT p_limit
               FOR UPDATE OF c SKIP LOCKED) k
     WHERE pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(k.id));
    IF v_locked IS NULL THEN
        RETURN 0;
    END IF;

    WITH gone AS (
        DELETE FROM lonnymq_channel c
         WHERE c.id = ANY (v_locked)
           AND NOT lonnymq_channel_configured_v1(c)
           AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.channel_id = c.id)
           AND NOT EXISTS (SELECT 1 FROM lonnymq_dedup d WHERE d.channel_id = c.id)
        RETURNING c.id, c.queue, c.released_total
    ), marks AS (
        DELETE FROM lonnymq_wake w WHERE w.channel_id IN (SELECT g.id FROM gone g)
    ), counts AS (
        DELETE FROM lonnymq_release_count r WHERE r.channel_id IN (SELECT g.id FROM gone g)
        RETURNING r.channel_id, r.released
    ), folded AS (
        INSERT INTO lonnymq_queue_released AS q (queue, released)
        SELECT t.queue, pg_catalog.sum(t.n)::bigint
          FROM (SELECT g.queue, g.released_total AS n FROM gone g
                UNION ALL
                SELECT g.queue, r.released FROM counts r JOIN gone g ON g.id = r.channel_id) t
         GROUP BY t.queue
        HAVING pg_catalog.sum(t.n) > 0::numeric
         ORDER BY t.queue
        ON CONFLICT (queue) DO UPDATE SET released = q.released + excluded.released
    )
    SELECT pg_catalog.count(*)::integer INTO v_gone FROM gone;
    RETURN v_gone;
END
$$;
-- Exact figures per queue (all queues when p_queues is NULL), as sample rows with id NULL.
-- A paused channel's waiting messages count as paused only: never ready, never scheduled,
-- and never the oldest ready (an operator who pauses a tenant is not alerted by its wait).
-- Cost: ready/scheduled/paused walk the ready index (channel_id, dequeue_at, id) once per
-- channel, i.e. one index entry per waiting message of the queue (index-only when the
-- visibility map allows); in_flight walks the lease index (messages in flight only); dead
-- walks the (queue, died_at) index. No scan of the message table's heap by channel.
-- released_total is the sum of the channel rows' counters, of lonnymq_release_count (a
-- small table) and of the queue's pruned channels (lonnymq_queue_released), so it never falls
-- when a channel is pruned; a queue whose channels were all pruned keeps its row.
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
