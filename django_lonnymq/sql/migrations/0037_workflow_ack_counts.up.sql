-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0037: a step's ack reaches the children it counts through their primary
-- key whatever the planner knows of the tables.
-- - lonnymq_workflow_ack_v2 (same name, arguments and result): the children's counts go into
--   two arrays (each child once, in id order), and the statement that lowers the counts and
--   picks the ready children reads them row by row, one primary-key probe per child. Joined
--   to a CTE of the counts, it was planned as a hash join over a scan of the whole step
--   table, twice in every ack, while the table had no statistics (autovacuum off, or a fresh
--   table): 1.45 ms of a 50-step ack's statement against 0.29 ms, growing with every row,
--   dead ones included, kept in the step table. (Naming the ids in the join instead,
--   id = ANY (array), made the generic plan a nested loop over the CTE: 400 ms for the
--   root's ack of a 1 -> 1,000 -> 1 workflow.) The workflows' update names its ids too.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- Ack steps (the worker's ack for messages whose dedup key says they are steps): the ack of
-- lonnymq_ack_v1, and in the same transaction each step acked now succeeds with its output,
-- its children count it, and every child whose parents have all succeeded is released
-- (unless its workflow was cancelled). A step whose lease is stale acks nothing, so a step
-- run twice counts once. Rows are locked in one order: messages (the ack), then steps (the
-- ones acked now, which no other ack can hold: each one's message was deleted by this ack;
-- then their waiting children by id), then workflows by id. Every statement reaches its
-- rows through an index (the ids given, the children's ids the acked steps' rows return),
-- whatever the size of the tables and whatever the planner knows of them: the children's
-- counts are read from arrays, one primary-key probe per child (joined to a CTE of the
-- counts, they were planned as a hash join over a scan of the whole step table, twice in
-- every ack, while the table had no statistics; migration 0037). A child is updated once,
-- by the ack that lowers its count or releases it, and a child shared by acks from other
-- workers (a fan-in) is locked only after this ack's own steps are written. Returns the
-- ids acked.
CREATE OR REPLACE FUNCTION lonnymq_workflow_ack_v2(p_ids bigint[], p_tokens uuid[], p_outputs jsonb[], p_tolerance_ms bigint)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_acked bigint[];
    v_flows bigint[];
    v_nflows integer;
    v_kids  bigint[];
    v_kid_ids bigint[];
    v_kid_ns  integer[];
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
    -- The steps done now, their workflows, and their children (a child once per parent done).
    WITH done AS (
        UPDATE lonnymq_workflow_step s
           SET state = 'succeeded', output = p_outputs[pg_catalog.array_position(p_ids, s.id)],
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
        PERFORM 1 FROM lonnymq_workflow_step s
         WHERE s.id = ANY (v_kids) AND s.state = 'waiting'
         ORDER BY s.id FOR UPDATE OF s;
        -- Each child once, with the number of its parents done now, as two arrays that the
        -- statement below reads row by row, each child through the primary key.
        SELECT pg_catalog.array_agg(k.id ORDER BY k.id), pg_catalog.array_agg(k.n ORDER BY k.id)
          INTO v_kid_ids, v_kid_ns
          FROM (SELECT u.id, pg_catalog.count(*)::integer AS n
                  FROM pg_catalog.unnest(v_kids) AS u(id) GROUP BY u.id) k;
        -- The children whose last parents are done now: released in one update each. The
        -- others have their count lowered.
        WITH lowered AS (
            UPDATE lonnymq_workflow_step s SET pending = s.pending - c.n
              FROM ROWS FROM (pg_catalog.unnest(v_kid_ids), pg_catalog.unnest(v_kid_ns)) AS c(child_id, n),
                   lonnymq_workflow w
             WHERE s.id = c.child_id AND s.state = 'waiting' AND w.id = s.workflow_id
               AND (s.pending <> c.n OR w.state = 'cancelled')
            RETURNING s.id
        )
        SELECT pg_catalog.array_agg(s.id ORDER BY s.id) INTO v_ready
          FROM ROWS FROM (pg_catalog.unnest(v_kid_ids), pg_catalog.unnest(v_kid_ns)) AS c(child_id, n)
          JOIN lonnymq_workflow_step s ON s.id = c.child_id
          JOIN lonnymq_workflow w ON w.id = s.workflow_id
         WHERE s.state = 'waiting' AND s.pending = c.n AND w.state <> 'cancelled';
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
     WHERE w.id = ANY (v_flows) AND w.id = d.workflow_id;
    RETURN v_acked;
END
$$;