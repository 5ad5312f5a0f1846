-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0034: a workflow's edges are arrays on its steps' rows (docs/workflows.md,
-- "Measured"). The start of a 1 -> 1,000 -> 1 workflow wrote 1,002 step rows and 2,000 edge
-- rows whose foreign keys made 4,000 checks; the edges' insert was its largest statement.
-- - lonnymq_workflow_step: parents and children (bigint[], ids in increasing order), with
--   the rule the edge table had (every edge from a smaller id to a larger), filled from the
--   edges kept so far.
-- - lonnymq_workflow_edge: a view of the steps' parents, one row per edge (same columns).
-- - lonnymq_workflow_start_v1, lonnymq_workflow_ack_v2, lonnymq_workflow_check_v1 (same
--   names, arguments and results): read and write the arrays. The start checks each queue
--   and channel once instead of once per step.
-- - lonnymq_workflow_inputs_v1 (new): a step's name and its parents' outputs, which the
--   workers' dequeue statement now returns with each step (one statement less per batch).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

ALTER TABLE lonnymq_workflow_step
    ADD COLUMN parents bigint[] NOT NULL DEFAULT '{}',
    ADD COLUMN children bigint[] NOT NULL DEFAULT '{}';
UPDATE lonnymq_workflow_step s
   SET parents = coalesce((SELECT pg_catalog.array_agg(e.parent_id ORDER BY e.parent_id)
                             FROM lonnymq_workflow_edge e WHERE e.child_id = s.id), ARRAY[]::bigint[]),
       children = coalesce((SELECT pg_catalog.array_agg(e.child_id ORDER BY e.child_id)
                              FROM lonnymq_workflow_edge e WHERE e.parent_id = s.id), ARRAY[]::bigint[])
 WHERE EXISTS (SELECT 1 FROM lonnymq_workflow_edge e WHERE e.child_id = s.id OR e.parent_id = s.id);
ALTER TABLE lonnymq_workflow_step
    ADD CONSTRAINT lonnymq_workflow_step_parents_before CHECK (id > ALL (parents)),
    ADD CONSTRAINT lonnymq_workflow_step_children_after CHECK (id < ALL (children));
DROP TABLE lonnymq_workflow_edge;

-- The DAG's edges, one row per edge, read from the steps' parents (for reading and for the
-- Django model WorkflowEdgeRecord; nothing writes it).
CREATE VIEW lonnymq_workflow_edge AS
SELECT e.parent_id, s.id AS child_id
  FROM lonnymq_workflow_step s CROSS JOIN LATERAL pg_catalog.unnest(s.parents) AS e(parent_id);

-- Start a workflow in the caller's transaction: the workflow row, its steps (given in a
-- topological order: every edge goes from a lower to a higher index) with their edges as
-- arrays of ids (each step's parents and children), and the messages of the steps without
-- parents. One row per step: no edge rows, no foreign-key checks. Returns the workflow id.
CREATE OR REPLACE FUNCTION lonnymq_workflow_start_v1(
    p_name                     text,
    p_channel                  text,
    p_names                    text[],
    p_queues                   text[],
    p_channels                 text[],
    p_payloads                 jsonb[],
    p_delays_ms                bigint[],
    p_max_attempts             integer[],
    p_edge_parents             integer[],
    p_edge_children            integer[],
    p_on_failure_queue         text,
    p_on_failure_channel       text,
    p_on_failure_payload       jsonb,
    p_on_failure_max_attempts  integer,
    p_tolerance_ms             bigint
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n    integer := coalesce(pg_catalog.cardinality(p_names), 0);
    v_id   bigint;
    v_ids  bigint[];
    v_bad  record;
    v_roots bigint[];
BEGIN
    PERFORM lonnymq_check_range_v1('steps', v_n::bigint, 1::bigint, 50000::bigint, false);
    IF pg_catalog.cardinality(p_queues) IS DISTINCT FROM v_n OR pg_catalog.cardinality(p_channels) IS DISTINCT FROM v_n
       OR pg_catalog.cardinality(p_payloads) IS DISTINCT FROM v_n OR pg_catalog.cardinality(p_delays_ms) IS DISTINCT FROM v_n
       OR pg_catalog.cardinality(p_max_attempts) IS DISTINCT FROM v_n THEN
        PERFORM lonnymq_raise_invalid_v1('steps', 'must give every step a queue, channel, payload, delay and max_attempts', v_n::text);
    END IF;
    IF coalesce(pg_catalog.cardinality(p_edge_parents), 0) <> coalesce(pg_catalog.cardinality(p_edge_children), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('after', 'must pair every parent with a child', NULL);
    END IF;
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    FOR v_bad IN
        SELECT u.p, u.c FROM ROWS FROM (pg_catalog.unnest(p_edge_parents), pg_catalog.unnest(p_edge_children)) AS u(p, c)
         WHERE u.p IS NULL OR u.c IS NULL OR u.p < 1 OR u.c > v_n OR u.p >= u.c LIMIT 1
    LOOP
        PERFORM lonnymq_raise_invalid_v1('after', 'must name an earlier step of the same workflow (no cycle)',
                                         pg_catalog.format('step %s after step %s', v_bad.c, v_bad.p));
    END LOOP;
    -- Each queue and channel once, in the order of their first step (the first bad one named).
    FOR v_bad IN
        SELECT u.q, u.ch
          FROM ROWS FROM (pg_catalog.unnest(p_queues), pg_catalog.unnest(p_channels)) WITH ORDINALITY AS u(q, ch, i)
         GROUP BY u.q, u.ch ORDER BY pg_catalog.min(u.i)
    LOOP
        PERFORM lonnymq_check_names_v1(v_bad.q, v_bad.ch);
    END LOOP;
    IF p_on_failure_queue IS NOT NULL THEN
        PERFORM lonnymq_check_names_v1(p_on_failure_queue, p_on_failure_channel);
    END IF;

    INSERT INTO lonnymq_workflow (name, channel, steps, remaining, on_failure_queue, on_failure_channel,
                                  on_failure_payload, on_failure_max_attempts)
    VALUES (p_name, p_channel, v_n, v_n, p_on_failure_queue, p_on_failure_channel, p_on_failure_payload,
            p_on_failure_max_attempts)
    RETURNING id INTO v_id;
    -- Ids in increasing order of the step index: every edge goes from a smaller id to a larger.
    SELECT pg_catalog.array_agg(x.id ORDER BY x.id) INTO v_ids
      FROM (SELECT pg_catalog.nextval('lonnymq_message_id_seq') AS id FROM pg_catalog.generate_series(1, v_n)) x;
    WITH edges AS MATERIALIZED (
        SELECT DISTINCT e.p, e.c
          FROM ROWS FROM (pg_catalog.unnest(p_edge_parents), pg_catalog.unnest(p_edge_children)) AS e(p, c)
    )
    INSERT INTO lonnymq_workflow_step (id, workflow_id, name, queue, channel, payload, delay_ms, max_attempts,
                                       pending, state, parents, children)
    SELECT v_ids[u.i], v_id, u.name, u.queue, u.channel, u.payload, coalesce(u.delay_ms, 0), u.max_attempts,
           coalesce(pg_catalog.cardinality(p.ids), 0), 'waiting', coalesce(p.ids, ARRAY[]::bigint[]),
           coalesce(c.ids, ARRAY[]::bigint[])
      FROM ROWS FROM (pg_catalog.unnest(p_names), pg_catalog.unnest(p_queues), pg_catalog.unnest(p_channels),
                      pg_catalog.unnest(p_payloads), pg_catalog.unnest(p_delays_ms), pg_catalog.unnest(p_max_attempts))
           WITH ORDINALITY AS u(name, queue, channel, payload, delay_ms, max_attempts, i)
      LEFT JOIN (SELECT d.c, pg_catalog.array_agg(v_ids[d.p] ORDER BY d.p) AS ids FROM edges d GROUP BY d.c) p
             ON p.c = u.i
      LEFT JOIN (SELECT d.p, pg_catalog.array_agg(v_ids[d.c] ORDER BY d.c) AS ids FROM edges d GROUP BY d.p) c
             ON c.p = u.i
     ORDER BY u.i;
    SELECT pg_catalog.array_agg(s.id ORDER BY s.id) INTO v_roots
      FROM lonnymq_workflow_step s WHERE s.workflow_id = v_id AND s.pending = 0;
    PERFORM lonnymq_workflow_release_v1(v_roots, p_tolerance_ms);
    RETURN v_id;
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
-- only after this ack's own steps are written. Returns the ids acked.
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
        -- The children whose last parents are done now: released in one update each. The
        -- others have their count lowered.
        WITH counted AS (
            SELECT k.id AS child_id, pg_catalog.count(*)::integer AS n
              FROM pg_catalog.unnest(v_kids) AS k(id) GROUP BY k.id
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

-- What a worker gives a dequeued step's handler: its name, and its parents' outputs by name.
-- VOLATILE, so that called after a dequeue in the same statement it reads with a snapshot of
-- its own, taken after the dequeue's: it sees the ack that released the step (and wrote its
-- last parent's output) even when that ack committed while the statement ran.
CREATE FUNCTION lonnymq_workflow_inputs_v1(p_ids bigint[])
RETURNS TABLE (id bigint, name text, outputs jsonb)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    -- A batch without steps (NULL): nothing to read (plpgsql: its plan is kept per session).
    IF p_ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT s.id, s.name,
           coalesce((SELECT pg_catalog.jsonb_object_agg(p.name, coalesce(p.output, 'null'::jsonb))
                       FROM lonnymq_workflow_step p WHERE p.id = ANY (s.parents)), '{}'::jsonb)
      FROM lonnymq_workflow_step s WHERE s.id = ANY (p_ids);
END
$$;

-- The workflow invariants api.check() adds: a waiting step whose parents have all succeeded
-- (it should have been released), a released step with a parent that has not succeeded.
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
$$;
