-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0032: the ack of workflow steps costs about what a plain ack does more
-- per step, whatever the size of the step table (docs/workflows.md, "Measured").
-- - lonnymq_workflow_release_v2 (new): releases ready steps with one update each (queued,
--   count 0, payload forgotten) and one insert of their messages.
-- - lonnymq_workflow_ack_v2 (new, same contract as _v1): every statement reaches its rows
--   through an index (_v1 scanned the step table and the edges for its locks and counts),
--   a released child is updated once instead of twice, and a fan-in child is locked after
--   the ack's own steps are written. _v1 moves to superseded.sql.
-- - lonnymq_workflow_step: fillfactor 50, so that a step's two updates (its release, its
--   ack) stay on its page as HOT updates, without new entries in its three indexes (pages
--   written before keep their fill until rewritten).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

ALTER TABLE lonnymq_workflow_step SET (fillfactor = 50);

-- Release steps (locked by the caller, ready: every parent succeeded) into the message table,
-- as an enqueue would: channels created in name order, each channel's shared advisory lock,
-- then one statement that marks the steps queued (their pending count 0, their payload
-- forgotten) and inserts their messages from the payloads they held, then one wake-up mark
-- per channel (which NOTIFYs the queue's workers at commit). One update per step: the
-- caller does not lower a released step's count first. Returns how many were released.
CREATE FUNCTION lonnymq_workflow_release_v2(p_ids bigint[], p_tolerance_ms bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now      bigint := lonnymq_now_ms_v1();
    v_group    record;
    v_queues   text[] := ARRAY[]::text[];
    v_channels text[] := ARRAY[]::text[];
    v_ids      bigint[] := ARRAY[]::bigint[];
    v_delays   bigint[] := ARRAY[]::bigint[];
    v_n        integer := 0;
BEGIN
    IF p_ids IS NULL OR pg_catalog.cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    FOR v_group IN
        SELECT s.queue, s.channel, pg_catalog.min(s.delay_ms) AS delay_ms
          FROM lonnymq_workflow_step s
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting'
         GROUP BY s.queue, s.channel ORDER BY s.queue, s.channel
    LOOP
        v_queues := v_queues OPERATOR(pg_catalog.||) v_group.queue;
        v_channels := v_channels OPERATOR(pg_catalog.||) v_group.channel;
        v_ids := v_ids OPERATOR(pg_catalog.||) lonnymq_channel_id_v1(v_group.queue, v_group.channel);
        v_delays := v_delays OPERATOR(pg_catalog.||) v_group.delay_ms;
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(),
                                                       lonnymq_lock_key_v1(v_ids[pg_catalog.cardinality(v_ids)]));
    END LOOP;
    IF pg_catalog.cardinality(v_ids) = 0 THEN
        RETURN 0;
    END IF;
    WITH released AS (
        UPDATE lonnymq_workflow_step s
           SET state = 'queued', pending = 0, payload = NULL, releases = s.releases + 1,
               released_at = pg_catalog.now()
          FROM lonnymq_workflow_step o
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting' AND o.id = s.id
        RETURNING s.id, s.queue, s.channel, o.payload, s.delay_ms, s.max_attempts, s.workflow_id
    ), inserted AS (
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
        SELECT r.id, c.id, r.payload, v_now + r.delay_ms, 0, r.max_attempts,
               'lonnymq.step:' OPERATOR(pg_catalog.||) r.workflow_id::text
          FROM released r
          JOIN ROWS FROM (pg_catalog.unnest(v_queues), pg_catalog.unnest(v_channels), pg_catalog.unnest(v_ids))
               AS c(queue, channel, id) ON c.queue = r.queue AND c.channel = r.channel
         ORDER BY r.id
        RETURNING 1
    )
    SELECT pg_catalog.count(*)::integer INTO v_n FROM inserted;
    FOR i IN 1 .. pg_catalog.cardinality(v_ids) LOOP
        PERFORM lonnymq_mark_v1(v_queues[i], v_ids[i], v_now + v_delays[i], p_tolerance_ms);
    END LOOP;
    RETURN v_n;
END
$$;

-- Ack steps (the worker's ack for messages whose dedup key says they are steps): the ack of
-- lonnymq_ack_v1, and in the same transaction each step acked now succeeds with its output,
-- its children count it, and every child whose parents have all succeeded is released
-- (unless its workflow was cancelled). A step whose lease is stale acks nothing, so a step
-- run twice counts once. Rows are locked in one order: messages (the ack), then steps (the
-- ones acked now, which no other ack can hold: each one's message was deleted by this ack;
-- then their waiting children by id), then workflows by id. Every statement reaches its
-- rows through an index (the ids given, the edges' primary key), whatever the size of the
-- tables; a child is updated once, by the ack that lowers its count or releases it, and a
-- child shared by acks from other workers (a fan-in) is locked only after this ack's own
-- steps are written. Returns the ids acked.
CREATE FUNCTION lonnymq_workflow_ack_v2(p_ids bigint[], p_tokens uuid[], p_outputs jsonb[], p_tolerance_ms bigint)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_acked bigint[];
    v_done  bigint[];
    v_flows bigint[];
    v_nflows integer;
    v_ready bigint[];
BEGIN
    IF coalesce(pg_catalog.cardinality(p_outputs), 0) <> coalesce(pg_catalog.cardinality(p_ids), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('outputs', 'must have one output per id', pg_catalog.cardinality(p_outputs)::text);
    END IF;
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    v_acked := lonnymq_ack_v1(p_ids, p_tokens);
    IF pg_catalog.cardinality(v_acked) = 0 THEN
        RETURN v_acked;
    END IF;
    WITH done AS (
        UPDATE lonnymq_workflow_step s
           SET state = 'succeeded', output = p_outputs[pg_catalog.array_position(p_ids, s.id)],
               finished_at = pg_catalog.now()
         WHERE s.id = ANY (v_acked) AND s.state = 'queued'
        RETURNING s.id, s.workflow_id
    )
    SELECT pg_catalog.array_agg(d.id ORDER BY d.id), pg_catalog.array_agg(d.workflow_id),
           pg_catalog.count(DISTINCT d.workflow_id)::integer
      INTO v_done, v_flows, v_nflows FROM done d;
    IF v_done IS NULL THEN
        RETURN v_acked;
    END IF;
    PERFORM 1 FROM lonnymq_workflow_step s
     WHERE s.id IN (SELECT e.child_id FROM lonnymq_workflow_edge e WHERE e.parent_id = ANY (v_done))
       AND s.state = 'waiting'
     ORDER BY s.id FOR UPDATE OF s;
    -- The children whose last parents are done now: released in one update each. The others
    -- have their count lowered.
    WITH counted AS (
        SELECT e.child_id, pg_catalog.count(*)::integer AS n
          FROM lonnymq_workflow_edge e WHERE e.parent_id = ANY (v_done) GROUP BY e.child_id
    ), lowered AS (
        UPDATE lonnymq_workflow_step s SET pending = s.pending - c.n
          FROM counted c, lonnymq_workflow w
         WHERE s.id = c.child_id AND s.state = 'waiting' AND w.id = s.workflow_id
           AND (s.pending <> c.n OR w.state = 'cancelled')
        RETURNING s.id
    )
    SELECT pg_catalog.array_agg(s.id ORDER BY s.id) INTO v_ready
      FROM counted c JOIN lonnymq_workflow_step s ON s.id = c.child_id
      JOIN lonnymq_workflow w ON w.id = s.workflow_id
     WHERE s.state = 'waiting' AND s.pending = c.n AND w.state <> 'cancelled';
    PERFORM lonnymq_workflow_release_v2(v_ready, p_tolerance_ms);
    IF v_nflows > 1 THEN
        PERFORM 1 FROM lonnymq_workflow w WHERE w.id = ANY (v_flows) ORDER BY w.id FOR NO KEY UPDATE;
    END IF;
    UPDATE lonnymq_workflow w
       SET remaining = w.remaining - d.n,
           state = CASE WHEN w.state = 'running' AND w.remaining = d.n THEN 'succeeded' ELSE w.state END,
           finished_at = CASE WHEN w.state = 'running' AND w.remaining = d.n THEN pg_catalog.now() ELSE w.finished_at END
      FROM (SELECT f.workflow_id, pg_catalog.count(*)::integer AS n
              FROM pg_catalog.unnest(v_flows) AS f(workflow_id) GROUP BY f.workflow_id) d
     WHERE w.id = d.workflow_id;
    RETURN v_acked;
END
$$;
