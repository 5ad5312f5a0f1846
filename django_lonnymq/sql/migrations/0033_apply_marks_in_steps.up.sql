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
