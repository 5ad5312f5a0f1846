-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0033: a dequeue applies producers' wake-up marks in steps. A bulk enqueue
-- into 100,000 parked channels leaves 100,000 marks; each of the next ten dequeues applied
-- 10,000 of them, after joining and sorting all that were left, and took 111-141 ms.
-- - lonnymq_apply_marks_v1 (same name, arguments and result): batches of 200 marks, taken
--   from lonnymq_wake_queue_idx in its order before their channel rows are joined, for at
--   most about 10 ms a call; the planner keeps the index's order where the table has no
--   statistics.
-- - lonnymq_marks_due_v1 (new): a queue's first marks due, from that index in its order.
-- - lonnymq_dequeue_held_v1 (same name, arguments and result): reads the marks through it
--   (it joined every mark left to its channel row before its limit: 324 ms at 89,000).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- A dequeuer's first step: apply the committed marks of a queue to their channels (only
-- ever earlier) and delete them, earliest first, in batches of 200 for at most about 10 ms
-- a call. Marks whose channel row another session holds stay for the next call; nothing
-- here waits. Each batch is taken from the queue's index in its order and only then joined
-- to its channel rows, so a batch costs the same whatever the number of marks left. A bulk
-- enqueue into 100,000 parked channels leaves 100,000 marks: applied 10,000 a call, after a
-- join and sort of all of them, they took each of the next ten dequeues past 100 ms
-- (docs/performance.md, "At scale"). The planner settings keep the index's order where the
-- table has no statistics yet (the default estimate of a queue's marks is a few hundred
-- rows, which the planner would rather fetch all and sort).
CREATE OR REPLACE FUNCTION lonnymq_apply_marks_v1(p_queue text, p_tolerance_ms bigint) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_start  timestamptz := pg_catalog.clock_timestamp();
    v_ids    bigint[];
    v_ats    bigint[];
    v_taken  integer;
BEGIN
    LOOP
        WITH picked AS (
            SELECT w.id, w.channel_id, w.dequeue_at
              FROM lonnymq_wake w
             WHERE w.queue = p_queue
             ORDER BY w.dequeue_at
             LIMIT 200
               FOR UPDATE OF w SKIP LOCKED
        ), marks AS (
            SELECT p.id, p.channel_id, p.dequeue_at
              FROM picked p
              JOIN lonnymq_channel c ON c.id = p.channel_id
               FOR NO KEY UPDATE OF c SKIP LOCKED
        ), gone AS (
            DELETE FROM lonnymq_wake w WHERE w.id IN (SELECT m.id FROM marks m)
            RETURNING w.channel_id, w.dequeue_at
        )
        SELECT pg_catalog.array_agg(g.channel_id ORDER BY g.channel_id), pg_catalog.array_agg(g.at ORDER BY g.channel_id),
               (SELECT pg_catalog.count(*) FROM picked)
          INTO v_ids, v_ats, v_taken
          FROM (SELECT channel_id, pg_catalog.min(dequeue_at) AS at FROM gone GROUP BY channel_id) g;
        IF v_ids IS NOT NULL THEN
            UPDATE lonnymq_channel c
               SET next_dequeue_at = greatest(u.at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at),
                   turn = pg_catalog.nextval('lonnymq_turn_seq') * 100000
              FROM ROWS FROM (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_ats)) AS u(id, at)
             WHERE c.id = u.id AND c.id = ANY (v_ids)
               AND (c.next_dequeue_at IS NULL
                    OR c.next_dequeue_at > greatest(u.at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at) + p_tolerance_ms);
        END IF;
        -- The queue's marks are all taken, or the rest are held by other dequeuers (rows this
        -- call holds come back to it: SKIP LOCKED skips only others'), or the time is spent.
        EXIT WHEN v_ids IS NULL OR v_taken < 200
               OR pg_catalog.clock_timestamp() - v_start > interval '10 milliseconds';
    END LOOP;
END
$$;

-- The first p_limit committed wake-up marks of a queue due by p_now, earliest first, read
-- without a lock (lonnymq_dequeue_held_v1's look at the channels being woken). From the
-- queue's index in its order, so it reads p_limit marks whatever the number left; joined to
-- their channel rows before the limit, 89,000 marks took 324 ms. The planner settings keep
-- that plan where the table has no statistics yet (see lonnymq_apply_marks_v1).
CREATE FUNCTION lonnymq_marks_due_v1(p_queue text, p_now bigint, p_limit integer)
RETURNS TABLE (channel_id bigint, dequeue_at bigint)
LANGUAGE sql STABLE
ROWS 100
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    SELECT w.channel_id, w.dequeue_at
      FROM lonnymq_wake w
     WHERE w.queue = p_queue AND w.dequeue_at <= p_now
     ORDER BY w.dequeue_at
     LIMIT p_limit
$$;

-- A dequeue that found no due channel it could lock: every due channel is held by another
-- dequeuer (or waiting on one's row made lonnymq_dequeue_v1 give up). The due channels that
-- have no limit (no concurrency cap, no release interval, no token bucket, not paused) are
-- served anyway: their next ready messages are leased through SKIP LOCKED on the message
-- rows alone, without the channel row, so a busy channel has as many dequeuers at once as
-- there are workers. Nothing on such a channel's row depends on one release: its holder still moves
-- its turn (and parks it only after a look at its messages), and the count goes to
-- lonnymq_release_count. Round robin is not at stake: every due channel is being served at
-- this moment (docs/locking.md). The batch is split evenly across the channels in their
-- round-robin order (weights are not at stake either). Never waits.
CREATE OR REPLACE FUNCTION lonnymq_dequeue_held_v1(
    p_queue      text,
    p_batch_size integer,
    p_now        bigint,
    p_lease_ms   bigint,
    p_worker     text,
    p_token      uuid
) RETURNS TABLE (
    id bigint, channel text, payload jsonb, attempts integer, max_attempts integer,
    priority smallint, dedup_key text, enqueued_at timestamptz, lease_token uuid, lease_until bigint
)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_seen     bigint[];
    v_ch_ids   bigint[];
    v_ch_names text[];
    v_msg_ids  bigint[];
    v_msg_ords bigint[];
    v_share    integer;
BEGIN
    -- Due channels without limits, in round-robin order, read without a lock: due by their
    -- turn, or by a committed wake-up mark that another dequeuer is applying right now.
    SELECT pg_catalog.array_agg(d.id ORDER BY d.at, d.turn) INTO v_seen
      FROM (SELECT DISTINCT ON (x.id) x.id, x.at, x.turn
              FROM ((SELECT c.id, c.next_dequeue_at AS at, c.turn FROM lonnymq_channel c
                      WHERE c.queue = p_queue
                        AND c.next_dequeue_at <= p_now
                        AND c.next_dequeue_at IS NOT NULL
                        AND NOT c.paused
                        AND (c.max_concurrency IS NULL OR c.in_flight < c.max_concurrency)
                        AND c.max_concurrency IS NULL
                        AND c.release_interval_ms = 0
                        AND c.rate_count IS NULL
                      ORDER BY c.next_dequeue_at, c.turn
                      LIMIT p_batch_size)
                    UNION ALL
                    (SELECT c.id, m.dequeue_at AS at, c.turn
                       FROM lonnymq_marks_due_v1(p_queue, p_now, p_batch_size) m
                       JOIN lonnymq_channel c ON c.id = m.channel_id
                      WHERE NOT c.paused
                        AND c.max_concurrency IS NULL
                        AND c.release_interval_ms = 0
                        AND c.rate_count IS NULL)) x
             ORDER BY x.id, x.at) d;
    IF v_seen IS NULL THEN
        RETURN;
    END IF;
    -- Say that leases without the row are being taken (a change of the channel's limits
    -- waits for this transaction), then read the limits again in a new statement, whose
    -- snapshot is taken after the lock: a limit set meanwhile is seen, or its change waits.
    -- (Only the limits: a channel's turn says nothing a ready message does not, when it has
    -- no limit.)
    SELECT pg_catalog.array_agg(u.id ORDER BY u.ord) INTO v_seen
      FROM pg_catalog.unnest(v_seen) WITH ORDINALITY AS u(id, ord)
     WHERE pg_catalog.pg_try_advisory_xact_lock_shared(lonnymq_lease_lock_ns_v1(), lonnymq_lock_key_v1(u.id));
    SELECT pg_catalog.array_agg(u.id ORDER BY u.ord), pg_catalog.array_agg(c.name ORDER BY u.ord)
      INTO v_ch_ids, v_ch_names
      FROM pg_catalog.unnest(v_seen) WITH ORDINALITY AS u(id, ord)
      JOIN lonnymq_channel c ON c.id = u.id AND c.id = ANY (v_seen)
     WHERE NOT c.paused
       AND c.max_concurrency IS NULL
       AND c.release_interval_ms = 0
       AND c.rate_count IS NULL;
    IF v_ch_ids IS NULL THEN
        RETURN;
    END IF;
    v_share := pg_catalog.ceil(p_batch_size::numeric / pg_catalog.cardinality(v_ch_ids)::numeric)::integer;

    SELECT pg_catalog.array_agg(x.id ORDER BY x.rank, x.ord), pg_catalog.array_agg(x.ord ORDER BY x.rank, x.ord)
      INTO v_msg_ids, v_msg_ords
      FROM (
        SELECT m.id, m.rank, p.ord
          FROM pg_catalog.unnest(v_ch_ids) WITH ORDINALITY AS p(channel_id, ord)
          CROSS JOIN LATERAL (
              SELECT q.id, pg_catalog.row_number() OVER (ORDER BY q.dequeue_at, q.id) AS rank
                FROM (SELECT mm.id, mm.dequeue_at
                        FROM lonnymq_message mm
                       WHERE mm.channel_id = p.channel_id
                         AND mm.lease_until IS NULL
                         AND mm.dequeue_at <= p_now
                       ORDER BY mm.dequeue_at, mm.id
                       LIMIT v_share
                         FOR UPDATE OF mm SKIP LOCKED) q
          ) m
         ORDER BY m.rank, p.ord
         LIMIT p_batch_size
      ) x;
    IF v_msg_ids IS NULL THEN
        RETURN;
    END IF;

    -- Lease them, count them on this backend's own rows (no other running transaction
    -- writes those, so the upsert never waits), and return them in batch order from the
    -- rows the update wrote.
    RETURN QUERY
        WITH leased AS (
            UPDATE lonnymq_message m
               SET lease_until = p_now + p_lease_ms,
                   lease_token = p_token,
                   leased_by = p_worker,
                   attempts = m.attempts + 1,
                   slot_taken = false
             WHERE m.id = ANY (v_msg_ids)
            RETURNING m.id, m.channel_id, m.payload, m.attempts, m.max_attempts, m.priority, m.dedup_key,
                      m.enqueued_at
        ), counted AS (
            INSERT INTO lonnymq_release_count AS r (channel_id, backend, released)
            SELECT l.channel_id, pg_catalog.pg_backend_pid(), pg_catalog.count(*)
              FROM leased l GROUP BY l.channel_id
            ON CONFLICT (channel_id, backend) DO UPDATE SET released = r.released + excluded.released
        )
        SELECT l.id, v_ch_names[v_msg_ords[o.pos]], l.payload, l.attempts, l.max_attempts, l.priority,
               l.dedup_key, l.enqueued_at, p_token, p_now + p_lease_ms
          FROM pg_catalog.unnest(v_msg_ids) WITH ORDINALITY AS o(id, pos)
          JOIN leased l ON l.id = o.id
         ORDER BY o.pos;
END
$$;
