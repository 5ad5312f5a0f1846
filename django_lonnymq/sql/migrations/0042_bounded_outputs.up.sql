-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0042: bounded step inputs. A fan-in whose parents' outputs added up past
-- PostgreSQL's 256 MB jsonb limit failed every dequeue that reached it
-- (ProgramLimitExceeded): the step was never delivered nor dead-lettered, and the other
-- tenants of its queue starved. A step's inputs may now take at most 64 MiB (the sum of its
-- parents' outputs as stored), checked where its last parent acks and again at its dequeue.
-- - lonnymq_workflow_step.output_bytes (new column): the output's stored size, written by the
--   ack (NULL for the steps acked before this migration: their text length is used).
-- - New: lonnymq_workflow_inputs_bytes_v1 (the sum), lonnymq_inputs_too_large_v1 (the error).
-- - lonnymq_workflow_ack_v2 (same contract): records output_bytes; a child it releases whose
--   inputs are past the bound is dead-lettered at once ('discarded', 'inputs_too_large: ...'),
--   which fails its workflow as any dead step does.
-- - New: lonnymq_workflow_inputs_v2, _v1 with the inputs' size, and NULL outputs past the
--   bound (never built); the worker dead-letters such a step. _v1 stays for the previous
--   release's workers (superseded.sql).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

ALTER TABLE lonnymq_workflow_step ADD COLUMN output_bytes integer NULL;


-- The bytes a step's inputs take: the sum of its parents' outputs as stored (output_bytes;
-- for an output acked before 0042, its length as JSON text). A step's inputs may take at most
-- 64 MiB (67,108,864 bytes, bounds.MAX_STEP_INPUTS): with the keys, whatever the number of
-- parents, far below the 256 MB of the largest jsonb value, and their text far below the
-- 1 GB of the largest value a row can send.
CREATE FUNCTION lonnymq_workflow_inputs_bytes_v1(p_parents bigint[]) RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT coalesce(pg_catalog.sum(coalesce(p.output_bytes::bigint,
                                            pg_catalog.octet_length(p.output::text)::bigint)), 0)::bigint
      FROM lonnymq_workflow_step p WHERE p.id = ANY (p_parents)
$$;


-- The error a step whose inputs are past the bound is dead-lettered with.
CREATE FUNCTION lonnymq_inputs_too_large_v1(p_bytes bigint) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT pg_catalog.format('inputs_too_large: the outputs of its parents take %s bytes as stored, more than '
                             'the 67108864 (64 MiB) a step''s inputs may take', p_bytes)
$$;


-- Ack steps (the worker's ack for messages whose dedup key says they are steps): the ack of
-- lonnymq_ack_v1, and in the same transaction each step acked now succeeds with its output,
-- its children count it, and every child whose parents have all succeeded is released (unless
-- its workflow was cancelled). A released child whose parents' outputs add up to more than 64
-- MiB as stored (the sum of their output_bytes; only a child of more than 8 parents can, each
-- output being at most 8 MiB) cannot be given its inputs: it is dead-lettered at once as
-- 'discarded' with an error saying 'inputs_too_large', which fails its workflow (and enqueues
-- on_failure) as any dead step does. A step whose lease is stale acks nothing, so a step run
-- twice counts once. Rows are locked in one order: messages (the ack), then steps (the ones
-- acked now, which no other ack can hold: each one's message was deleted by this ack; then
-- their waiting children by id), then workflows by id. Every statement reaches its rows
-- through an index (the ids given, the children's ids the acked steps' rows return), whatever
-- the size of the tables; a child is updated once, by the ack that lowers its count or
-- releases it, and a child shared by acks from other workers (a fan-in) is locked only after
-- this ack's own steps are written. The children are locked and counted in one statement: a
-- child another ack updated while this one waited for its lock is read as that ack left it
-- (READ COMMITTED's recheck of a locked row). No nested loops: every join here is between id
-- arrays and the rows they name, whose sizes a generic plan cannot know.
-- Returns the ids acked.
CREATE OR REPLACE FUNCTION lonnymq_workflow_ack_v2(p_ids bigint[], p_tokens uuid[], p_outputs jsonb[], p_tolerance_ms bigint)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_nestloop = off
SET jit = off
AS $$
DECLARE
    v_acked   bigint[];
    v_flows   bigint[];
    v_nflows  integer;
    v_kids    bigint[];
    v_ready   bigint[];
    v_lower   bigint[];
    v_lower_n integer[];
    v_cancelled bigint[];
    v_big     bigint[];
    v_big_bytes bigint[];
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
               output_bytes = coalesce(pg_catalog.pg_column_size(p_outputs[pg_catalog.array_position(p_ids, s.id)]), 0),
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
        -- The cancelled workflows among these (a child is in its parent's workflow): their
        -- children are counted, never released. A cancel that commits after this read has
        -- marked its waiting steps cancelled, which the locking read below rechecks.
        SELECT pg_catalog.array_agg(w.id) INTO v_cancelled
          FROM lonnymq_workflow w WHERE w.id = ANY (v_flows) AND w.state = 'cancelled';
        -- The waiting children, locked in id order: those whose last parents are done now
        -- (released in one update each) and the others (their count lowered). Reached by
        -- their ids ("= ANY") and matched to their counts by a hash or merge join: a generic
        -- plan made while the tables looked small joined them in a nested loop, which read
        -- the children once per child (a 1,000-child release took 20 to 60 ms).
        SELECT pg_catalog.array_agg(x.id ORDER BY x.id) FILTER (WHERE x.ready),
               pg_catalog.array_agg(x.id ORDER BY x.id) FILTER (WHERE NOT x.ready),
               pg_catalog.array_agg(x.n ORDER BY x.id) FILTER (WHERE NOT x.ready)
          INTO v_ready, v_lower, v_lower_n
          FROM (SELECT s.id, c.n,
                       s.pending = c.n AND (v_cancelled IS NULL OR s.workflow_id <> ALL (v_cancelled)) AS ready
                  FROM lonnymq_workflow_step s
                  JOIN (SELECT k.id, pg_catalog.count(*)::integer AS n
                          FROM pg_catalog.unnest(v_kids) AS k(id) GROUP BY k.id) c ON c.id = s.id
                 WHERE s.id = ANY (v_kids) AND s.state = 'waiting'
                 ORDER BY s.id FOR UPDATE OF s) x;
        IF v_lower IS NOT NULL THEN
            UPDATE lonnymq_workflow_step s SET pending = s.pending - u.n
              FROM ROWS FROM (pg_catalog.unnest(v_lower), pg_catalog.unnest(v_lower_n)) AS u(id, n)
             WHERE s.id = ANY (v_lower) AND s.id = u.id;
        END IF;
        IF v_ready IS NOT NULL THEN
            PERFORM lonnymq_workflow_release_v2(v_ready, p_tolerance_ms);
            -- The released children whose inputs are past the bound (a fan-in of more than 8).
            SELECT pg_catalog.array_agg(x.id ORDER BY x.id), pg_catalog.array_agg(x.bytes ORDER BY x.id)
              INTO v_big, v_big_bytes
              FROM (SELECT s.id, lonnymq_workflow_inputs_bytes_v1(s.parents) AS bytes
                      FROM lonnymq_workflow_step s
                     WHERE s.id = ANY (v_ready) AND pg_catalog.cardinality(s.parents) > 8) x
             WHERE x.bytes > 67108864;
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
    -- Last: the workflows are locked (in id order, above) before a dead step's trigger updates
    -- its own.
    IF v_big IS NOT NULL THEN
        FOR i IN 1 .. pg_catalog.cardinality(v_big) LOOP
            PERFORM lonnymq_bury_v1(ARRAY[v_big[i]], 'discarded', lonnymq_inputs_too_large_v1(v_big_bytes[i]));
        END LOOP;
    END IF;
    RETURN v_acked;
END
$$;


-- What a worker gives a dequeued step's handler: its name, its parents' outputs by name, and
-- the bytes they take (lonnymq_workflow_inputs_bytes_v1). Inputs past the bound are never
-- built (their outputs are NULL): the worker dead-letters the step as the ack that released
-- it did (a step requeued from the dead letters comes back this way). VOLATILE, so that
-- called after a dequeue in the same statement it reads with a snapshot of its own, taken
-- after the dequeue's: it sees the ack that released the step (and wrote its last parent's
-- output) even when that ack committed while the statement ran.
CREATE FUNCTION lonnymq_workflow_inputs_v2(p_ids bigint[])
RETURNS TABLE (id bigint, name text, outputs jsonb, inputs_bytes bigint)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    -- A batch without steps (NULL): nothing to read (plpgsql: its plan is kept per session).
    IF p_ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT x.id, x.name,
           CASE WHEN x.bytes <= 67108864 THEN
               coalesce((SELECT pg_catalog.jsonb_object_agg(p.name, coalesce(p.output, 'null'::jsonb))
                           FROM lonnymq_workflow_step p WHERE p.id = ANY (x.parents)), '{}'::jsonb)
           END,
           x.bytes
      FROM (SELECT s.id, s.name, s.parents, lonnymq_workflow_inputs_bytes_v1(s.parents) AS bytes
              FROM lonnymq_workflow_step s WHERE s.id = ANY (p_ids)) x;
END
$$;
