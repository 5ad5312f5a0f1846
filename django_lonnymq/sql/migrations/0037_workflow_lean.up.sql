-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0037: a lighter workflow start and fan-out ack.
-- - lonnymq_workflow_step loses its foreign key to lonnymq_workflow (the key's check on each
--   step a start inserts was about 4 ms of a 1,000-step start) and the index
--   lonnymq_workflow_step_workflow_idx (workflow_id, id): lonnymq_workflow_step_name_unique
--   (workflow_id, name) finds a workflow's steps. The key's ON DELETE CASCADE becomes the
--   statement triggers lonnymq_workflow_deleted and lonnymq_workflow_truncated (new function
--   lonnymq_workflow_deleted_v1).
-- - lonnymq_workflow_check_v1 (same contract): also reports 'workflow_step_orphaned', a step
--   whose workflow is missing.
-- - lonnymq_workflow_ack_v2 (same contract): locks and counts the acked steps' waiting
--   children in one statement (it locked them, then counted them twice), lowers only the
--   counts of the children not released, and forgets an acked step's payload.
-- - lonnymq_workflow_release_v2 (same contract): a released step keeps its payload until its
--   ack, so the release's update returns it without a second read of every row.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

ALTER TABLE lonnymq_workflow_step DROP CONSTRAINT lonnymq_workflow_step_workflow_id_fkey;
DROP INDEX lonnymq_workflow_step_workflow_idx;

-- A workflow's steps go with it (a prune, the admin, any DELETE or TRUNCATE), in the statement
-- that deletes it: what a foreign key's ON DELETE CASCADE did before 0037, without the key's check
-- on every step a start inserts (about 4 ms of a 1,000-step start). Only
-- lonnymq_workflow_start_v1 writes steps, for the workflow it has just inserted;
-- lonnymq_workflow_check_v1 reports a step whose workflow is missing. The steps of a
-- workflow are found through lonnymq_workflow_step_name_unique (workflow_id, name).
CREATE FUNCTION lonnymq_workflow_deleted_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        -- A DELETE: a TRUNCATE here fails when the statement that fired it truncates the steps too.
        DELETE FROM lonnymq_workflow_step;
    ELSE
        DELETE FROM lonnymq_workflow_step s USING gone g WHERE s.workflow_id = g.id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER lonnymq_workflow_deleted AFTER DELETE ON lonnymq_workflow
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION lonnymq_workflow_deleted_v1();
CREATE TRIGGER lonnymq_workflow_truncated AFTER TRUNCATE ON lonnymq_workflow
    FOR EACH STATEMENT EXECUTE FUNCTION lonnymq_workflow_deleted_v1();

-- Release steps (locked by the caller, ready: every parent succeeded) into the message table,
-- as an enqueue would: channels created in name order, each channel's shared advisory lock,
-- then one statement that marks the steps queued (their pending count 0) and inserts their
-- messages from the payloads they hold, then one wake-up mark per channel (which NOTIFYs the
-- queue's workers at commit). One update per step: the caller does not lower a released
-- step's count first. A step keeps its payload until it succeeds (its ack forgets it), so
-- the update returns it without reading each row a second time. Returns how many were
-- released.
CREATE OR REPLACE FUNCTION lonnymq_workflow_release_v2(p_ids bigint[], p_tolerance_ms bigint) RETURNS integer
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
    PERFORM lonnymq_hold_channels_v1(v_ids);
    WITH released AS (
        UPDATE lonnymq_workflow_step s
           SET state = 'queued', pending = 0, releases = s.releases + 1, released_at = pg_catalog.now()
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting'
        RETURNING s.id, s.queue, s.channel, s.payload, s.delay_ms, s.max_attempts, s.workflow_id
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
-- rows through an index (the ids given, the children's ids the acked steps' rows return),
-- whatever the size of the tables; a child is updated once, by the ack that lowers its
-- count or releases it, and a child shared by acks from other workers (a fan-in) is locked
-- only after this ack's own steps are written. The children are locked and counted in one
-- statement: a child another ack updated while this one waited for its lock is read as that
-- ack left it (READ COMMITTED's recheck of a locked row). Returns the ids acked.
CREATE OR REPLACE FUNCTION lonnymq_workflow_ack_v2(p_ids bigint[], p_tokens uuid[], p_outputs jsonb[], p_tolerance_ms bigint)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_acked   bigint[];
    v_flows   bigint[];
    v_nflows  integer;
    v_kids    bigint[];
    v_ready   bigint[];
    v_lower   bigint[];
    v_lower_n integer[];
BEGIN
    IF coalesce(pg_catalog.cardinality(p_outputs), 0) <> coalesce(pg_catalog.cardinality(p_ids), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('outputs', 'must have one output per id', pg_catalog.cardinality(p_outputs)::text);
    END IF;
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    v_acked := lonnymq_ack_v1(p_ids, p_tokens);
    IF pg_catalog.cardinality(v_acked) = 0 THEN
        RETURN v_acked;
    END IF;
    -- The steps done now (their payload forgotten), their workflows, and their children (a
    -- child once per parent done).
    WITH done AS (
        UPDATE lonnymq_workflow_step s
           SET state = 'succeeded', output = p_outputs[pg_catalog.array_position(p_ids, s.id)], payload = NULL,
               finished_at = pg_catalog.now()
         WHERE s.id = ANY (v_acked) AND s.state = 'queued'
        RETURNING s.workflow_id, s.children
    )
    SELECT pg_catalog.array_agg(d.workflow_id), pg_catalog.count(DISTINCT d.workflow_id)::integer,
           (SELECT pg_catalog.array_agg(k.id ORDER BY k.id)
              FROM done x CROSS JOIN LATERAL pg_catalog.unnest(x.children) AS k(id))
      INTO v_flows, v_nflows, v_kids FROM done d;
    IF v_flows IS NULL THEN
        RETURN v_acked;
    END IF;
    IF v_kids IS NOT NULL THEN
        -- The waiting children, locked in id order: those whose last parents are done now
        -- (released in one update each) and the others (their count lowered).
        SELECT pg_catalog.array_agg(x.id ORDER BY x.id) FILTER (WHERE x.ready),
               pg_catalog.array_agg(x.id ORDER BY x.id) FILTER (WHERE NOT x.ready),
               pg_catalog.array_agg(x.n ORDER BY x.id) FILTER (WHERE NOT x.ready)
          INTO v_ready, v_lower, v_lower_n
          FROM (SELECT s.id, c.n, s.pending = c.n AND w.state <> 'cancelled' AS ready
                  FROM (SELECT k.id, pg_catalog.count(*)::integer AS n
                          FROM pg_catalog.unnest(v_kids) AS k(id) GROUP BY k.id) c
                  JOIN lonnymq_workflow_step s ON s.id = c.id
                  JOIN lonnymq_workflow w ON w.id = s.workflow_id
                 WHERE s.state = 'waiting'
                 ORDER BY s.id FOR UPDATE OF s) x;
        IF v_lower IS NOT NULL THEN
            UPDATE lonnymq_workflow_step s SET pending = s.pending - u.n
              FROM ROWS FROM (pg_catalog.unnest(v_lower), pg_catalog.unnest(v_lower_n)) AS u(id, n)
             WHERE s.id = u.id;
        END IF;
        IF v_ready IS NOT NULL THEN
            PERFORM lonnymq_workflow_release_v2(v_ready, p_tolerance_ms);
        END IF;
    END IF;
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

-- The workflow invariants api.check() adds: a waiting step whose parents have all succeeded
-- (it should have been released), a released step with a parent that has not succeeded, a
-- step whose workflow is missing (steps have no foreign key since 0037).
CREATE OR REPLACE FUNCTION lonnymq_workflow_check_v1()
RETURNS TABLE (workflow_id bigint, step_id bigint, queue text, channel text, problem text, detail text)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT s.workflow_id, s.id, s.queue, s.channel, 'workflow_step_not_released',
           pg_catalog.format('step %s of workflow %s waits, but its parents have all succeeded', s.name, s.workflow_id)
      FROM lonnymq_workflow_step s JOIN lonnymq_workflow w ON w.id = s.workflow_id
     WHERE s.state = 'waiting' AND w.state <> 'cancelled'
       AND NOT EXISTS (SELECT 1 FROM lonnymq_workflow_step p WHERE p.id = ANY (s.parents) AND p.state <> 'succeeded')
    UNION ALL
    SELECT s.workflow_id, s.id, s.queue, s.channel, 'workflow_step_released_early',
           pg_catalog.format('step %s of workflow %s was released, but its parent %s is %s', s.name, s.workflow_id,
                             p.name, p.state)
      FROM lonnymq_workflow_step s
      CROSS JOIN LATERAL pg_catalog.unnest(s.parents) AS e(parent_id)
      JOIN lonnymq_workflow_step p ON p.id = e.parent_id
     WHERE s.releases > 0 AND p.state <> 'succeeded'
    UNION ALL
    SELECT s.workflow_id, s.id, s.queue, s.channel, 'workflow_step_orphaned',
           pg_catalog.format('step %s belongs to workflow %s, which does not exist', s.name, s.workflow_id)
      FROM lonnymq_workflow_step s
     WHERE NOT EXISTS (SELECT 1 FROM lonnymq_workflow w WHERE w.id = s.workflow_id)
$$;
