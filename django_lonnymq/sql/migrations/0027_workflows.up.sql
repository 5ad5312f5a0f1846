-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0027: Workflows, steps of a DAG released by the ack of their last parent.
-- - lonnymq_workflow, lonnymq_workflow_step, lonnymq_workflow_edge (new).
-- - lonnymq_workflow_start_v1, lonnymq_workflow_release_v1, lonnymq_workflow_ack_v1,
--   lonnymq_workflow_cancel_v1, lonnymq_workflow_prune_v1, lonnymq_workflow_check_v1 (new).
-- - Triggers on lonnymq_dead_message, for step messages only: a dead step fails its
--   workflow, a requeued one resumes it. No existing function changes.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- ---------------------------------------------------------------------------------------
-- Workflows: steps of a DAG released by the ack of their last parent (django_lonnymq/workflows.py)
-- ---------------------------------------------------------------------------------------

-- A workflow: its steps, how many have not succeeded yet, how many are dead now. running
-- -> succeeded (every step succeeded), running -> failed (a step is dead; back to running
-- when the dead steps are requeued), running or failed -> cancelled.
CREATE TABLE lonnymq_workflow (
    id                     bigserial   PRIMARY KEY,
    name                   text        NOT NULL,
    -- The steps' default channel (the tenant, for the admin's list).
    channel                text        NULL,
    state                  text        NOT NULL DEFAULT 'running',
    steps                  integer     NOT NULL,
    remaining              integer     NOT NULL,
    dead                   integer     NOT NULL DEFAULT 0,
    -- The message enqueued once when the workflow first fails (flow.on_failure).
    on_failure_queue       text        NULL,
    on_failure_channel     text        NULL,
    on_failure_payload     jsonb       NULL,
    on_failure_max_attempts integer    NULL,
    on_failure_message_id  bigint      NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    finished_at            timestamptz NULL,
    CONSTRAINT lonnymq_workflow_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_workflow_state_known CHECK (state IN ('running', 'succeeded', 'failed', 'cancelled')),
    -- At most 50,000 steps (django_lonnymq.bounds.MAX_WORKFLOW_STEPS).
    CONSTRAINT lonnymq_workflow_steps_range CHECK (steps BETWEEN 1 AND 50000),
    CONSTRAINT lonnymq_workflow_remaining_range CHECK (remaining BETWEEN 0 AND steps),
    CONSTRAINT lonnymq_workflow_dead_range CHECK (dead BETWEEN 0 AND steps),
    CONSTRAINT lonnymq_workflow_succeeded_all_done CHECK (state <> 'succeeded' OR remaining = 0),
    CONSTRAINT lonnymq_workflow_finished_when_not_running CHECK ((finished_at IS NULL) = (state = 'running')),
    CONSTRAINT lonnymq_workflow_on_failure_complete
        CHECK ((on_failure_queue IS NULL) = (on_failure_payload IS NULL)
               AND (on_failure_queue IS NULL) = (on_failure_channel IS NULL)
               AND (on_failure_queue IS NULL) = (on_failure_max_attempts IS NULL))
);
CREATE INDEX lonnymq_workflow_state_idx ON lonnymq_workflow (state, id);
CREATE INDEX lonnymq_workflow_finished_idx ON lonnymq_workflow (finished_at) WHERE finished_at IS NOT NULL;

-- A step. Its id is the id of its message (both from lonnymq_message_id_seq), allocated in
-- the order of a topological sort, so every parent's id is smaller than its children's. A
-- waiting step keeps its payload here and is not in the message table; its release inserts
-- its message (dedup key 'lonnymq.step:<workflow id>', which tells the worker it is a step)
-- and forgets the payload. pending counts the parents that have not succeeded.
CREATE TABLE lonnymq_workflow_step (
    id            bigint      PRIMARY KEY,
    workflow_id   bigint      NOT NULL REFERENCES lonnymq_workflow (id) ON DELETE CASCADE,
    name          text        NOT NULL,
    queue         text        NOT NULL,
    channel       text        NOT NULL,
    payload       jsonb       NULL,
    delay_ms      bigint      NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL,
    pending       integer     NOT NULL,
    state         text        NOT NULL,
    output        jsonb       NULL,
    -- Times this step was put into the message table by a start or a release (exactly 1 once
    -- released; a requeue of its dead message is not a release).
    releases      integer     NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now(),
    released_at   timestamptz NULL,
    finished_at   timestamptz NULL,
    CONSTRAINT lonnymq_workflow_step_name_unique UNIQUE (workflow_id, name),
    CONSTRAINT lonnymq_workflow_step_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_workflow_step_state_known
        CHECK (state IN ('waiting', 'queued', 'succeeded', 'dead', 'cancelled')),
    CONSTRAINT lonnymq_workflow_step_pending_nonnegative CHECK (pending >= 0),
    CONSTRAINT lonnymq_workflow_step_waiting_has_payload CHECK (state <> 'waiting' OR payload IS NOT NULL),
    CONSTRAINT lonnymq_workflow_step_released_once CHECK (releases BETWEEN 0 AND 1),
    CONSTRAINT lonnymq_workflow_step_released_when_ready CHECK (releases = 0 OR pending = 0),
    CONSTRAINT lonnymq_workflow_step_delay_range CHECK (delay_ms BETWEEN 0 AND 3155760000000),
    CONSTRAINT lonnymq_workflow_step_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT lonnymq_workflow_step_output_size CHECK (pg_column_size(output) <= 8388608)
);
CREATE INDEX lonnymq_workflow_step_workflow_idx ON lonnymq_workflow_step (workflow_id, id);

-- The DAG's edges. parent_id < child_id: no cycle can be stored.
CREATE TABLE lonnymq_workflow_edge (
    parent_id  bigint NOT NULL REFERENCES lonnymq_workflow_step (id) ON DELETE CASCADE,
    child_id   bigint NOT NULL REFERENCES lonnymq_workflow_step (id) ON DELETE CASCADE,
    PRIMARY KEY (parent_id, child_id),
    CONSTRAINT lonnymq_workflow_edge_acyclic CHECK (parent_id < child_id)
);
CREATE INDEX lonnymq_workflow_edge_child_idx ON lonnymq_workflow_edge (child_id);

-- Put steps (locked by the caller, ready: pending = 0) into the message table, as an
-- enqueue would: channels created in name order, each channel's shared advisory lock, one
-- wake-up mark per channel (which NOTIFYs the queue's workers at commit).
CREATE FUNCTION lonnymq_workflow_release_v1(p_ids bigint[], p_tolerance_ms bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now        bigint := lonnymq_now_ms_v1();
    v_group      record;
    v_channel_id bigint;
    v_n          integer := 0;
BEGIN
    IF p_ids IS NULL OR pg_catalog.cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    FOR v_group IN
        SELECT s.queue, s.channel, pg_catalog.min(s.delay_ms) AS delay_ms
          FROM lonnymq_workflow_step s
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting' AND s.pending = 0
         GROUP BY s.queue, s.channel ORDER BY s.queue, s.channel
    LOOP
        v_channel_id := lonnymq_channel_id_v1(v_group.queue, v_group.channel);
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(v_channel_id));
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
        SELECT s.id, v_channel_id, s.payload, v_now + s.delay_ms, 0, s.max_attempts,
               'lonnymq.step:' OPERATOR(pg_catalog.||) s.workflow_id::text
          FROM lonnymq_workflow_step s
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting' AND s.pending = 0
           AND s.queue = v_group.queue AND s.channel = v_group.channel
         ORDER BY s.id;
        PERFORM lonnymq_mark_v1(v_group.queue, v_channel_id, v_now + v_group.delay_ms, p_tolerance_ms);
    END LOOP;
    UPDATE lonnymq_workflow_step s
       SET state = 'queued', payload = NULL, releases = s.releases + 1, released_at = pg_catalog.now()
     WHERE s.id = ANY (p_ids) AND s.state = 'waiting' AND s.pending = 0;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- Start a workflow in the caller's transaction: the workflow row, its steps (given in a
-- topological order: every edge goes from a lower to a higher index), its edges, and the
-- messages of the steps without parents. Returns the workflow id.
CREATE FUNCTION lonnymq_workflow_start_v1(
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
    FOR v_bad IN
        SELECT u.q, u.ch FROM ROWS FROM (pg_catalog.unnest(p_queues), pg_catalog.unnest(p_channels)) AS u(q, ch)
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
    INSERT INTO lonnymq_workflow_step (id, workflow_id, name, queue, channel, payload, delay_ms, max_attempts,
                                       pending, state)
    SELECT v_ids[u.i], v_id, u.name, u.queue, u.channel, u.payload, coalesce(u.delay_ms, 0), u.max_attempts,
           coalesce(p.n, 0), 'waiting'
      FROM ROWS FROM (pg_catalog.unnest(p_names), pg_catalog.unnest(p_queues), pg_catalog.unnest(p_channels),
                      pg_catalog.unnest(p_payloads), pg_catalog.unnest(p_delays_ms), pg_catalog.unnest(p_max_attempts))
           WITH ORDINALITY AS u(name, queue, channel, payload, delay_ms, max_attempts, i)
      LEFT JOIN (SELECT d.c, pg_catalog.count(*)::integer AS n
                   FROM (SELECT DISTINCT e.p, e.c
                           FROM ROWS FROM (pg_catalog.unnest(p_edge_parents), pg_catalog.unnest(p_edge_children)) AS e(p, c)) d
                  GROUP BY d.c) p ON p.c = u.i
     ORDER BY u.i;
    INSERT INTO lonnymq_workflow_edge (parent_id, child_id)
    SELECT DISTINCT v_ids[e.p], v_ids[e.c]
      FROM ROWS FROM (pg_catalog.unnest(p_edge_parents), pg_catalog.unnest(p_edge_children)) AS e(p, c);
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
-- run twice counts once. Rows are locked in one order: messages (the ack), then steps by
-- id, then workflows by id. Returns the ids acked.
CREATE FUNCTION lonnymq_workflow_ack_v1(p_ids bigint[], p_tokens uuid[], p_outputs jsonb[], p_tolerance_ms bigint)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_acked bigint[];
    v_done  bigint[];
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
    PERFORM 1 FROM lonnymq_workflow_step s
     WHERE s.id = ANY (v_acked)
        OR s.id IN (SELECT e.child_id FROM lonnymq_workflow_edge e WHERE e.parent_id = ANY (v_acked))
     ORDER BY s.id FOR UPDATE;
    WITH done AS (
        UPDATE lonnymq_workflow_step s
           SET state = 'succeeded', output = u.output, finished_at = pg_catalog.now()
          FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_outputs)) AS u(id, output)
         WHERE s.id = u.id AND s.id = ANY (v_acked) AND s.state = 'queued'
        RETURNING s.id
    )
    SELECT pg_catalog.array_agg(d.id) INTO v_done FROM done d;
    IF v_done IS NULL THEN
        RETURN v_acked;
    END IF;
    WITH counted AS (
        SELECT e.child_id, pg_catalog.count(*)::integer AS n
          FROM lonnymq_workflow_edge e WHERE e.parent_id = ANY (v_done) GROUP BY e.child_id
    ), lowered AS (
        UPDATE lonnymq_workflow_step s SET pending = s.pending - c.n
          FROM counted c
         WHERE s.id = c.child_id AND s.state = 'waiting'
        RETURNING s.id, s.pending, s.workflow_id
    )
    SELECT pg_catalog.array_agg(l.id ORDER BY l.id) INTO v_ready
      FROM lowered l JOIN lonnymq_workflow w ON w.id = l.workflow_id
     WHERE l.pending = 0 AND w.state <> 'cancelled';
    PERFORM lonnymq_workflow_release_v1(v_ready, p_tolerance_ms);
    PERFORM 1 FROM lonnymq_workflow w
     WHERE w.id IN (SELECT s.workflow_id FROM lonnymq_workflow_step s WHERE s.id = ANY (v_done))
     ORDER BY w.id FOR NO KEY UPDATE;
    UPDATE lonnymq_workflow w
       SET remaining = w.remaining - d.n,
           state = CASE WHEN w.state = 'running' AND w.remaining = d.n THEN 'succeeded' ELSE w.state END,
           finished_at = CASE WHEN w.state = 'running' AND w.remaining = d.n THEN pg_catalog.now() ELSE w.finished_at END
      FROM (SELECT s.workflow_id, pg_catalog.count(*)::integer AS n FROM lonnymq_workflow_step s
             WHERE s.id = ANY (v_done) GROUP BY s.workflow_id) d
     WHERE w.id = d.workflow_id;
    RETURN v_acked;
END
$$;

-- A step's message went to the dead-letter table (attempts spent, discarded, timed out,
-- cancelled, lease expired): the step is dead and its workflow fails (its descendants wait
-- for good); the first failure enqueues the workflow's on_failure message. Under a cancelled
-- workflow the step is cancelled instead. The trigger fires only for step messages.
CREATE FUNCTION lonnymq_workflow_step_dead_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_workflow_id bigint;
    v_w record;
BEGIN
    SELECT s.workflow_id INTO v_workflow_id FROM lonnymq_workflow_step s
     WHERE s.id = NEW.id AND s.state = 'queued' FOR UPDATE;
    IF v_workflow_id IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT w.* INTO v_w FROM lonnymq_workflow w WHERE w.id = v_workflow_id FOR NO KEY UPDATE;
    IF v_w.state = 'cancelled' THEN
        UPDATE lonnymq_workflow_step s SET state = 'cancelled', finished_at = pg_catalog.now() WHERE s.id = NEW.id;
        RETURN NULL;
    END IF;
    UPDATE lonnymq_workflow_step s SET state = 'dead', finished_at = pg_catalog.now() WHERE s.id = NEW.id;
    UPDATE lonnymq_workflow w
       SET dead = w.dead + 1, state = 'failed', finished_at = coalesce(w.finished_at, pg_catalog.now())
     WHERE w.id = v_workflow_id;
    IF v_w.on_failure_queue IS NOT NULL AND v_w.on_failure_message_id IS NULL THEN
        UPDATE lonnymq_workflow w
           SET on_failure_message_id = lonnymq_enqueue_v1(
                   v_w.on_failure_queue, v_w.on_failure_channel, v_w.on_failure_payload, NULL::bigint,
                   NULL::bigint, 0, 'lonnymq.workflow_failed:' OPERATOR(pg_catalog.||) v_workflow_id::text,
                   v_w.on_failure_max_attempts, 1000::bigint, 50::bigint)
         WHERE w.id = v_workflow_id;
    END IF;
    RETURN NULL;
END
$$;

-- A dead step's message left the dead-letter table back into the message table (requeue):
-- the step is queued again, and its workflow runs again once no step of it is dead. (A
-- purged dead message leaves the step dead.)
CREATE FUNCTION lonnymq_workflow_step_requeued_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_workflow_id bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.id = OLD.id) THEN
        RETURN NULL;
    END IF;
    UPDATE lonnymq_workflow_step s SET state = 'queued', finished_at = NULL
     WHERE s.id = OLD.id AND s.state = 'dead'
    RETURNING s.workflow_id INTO v_workflow_id;
    IF v_workflow_id IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE lonnymq_workflow w
       SET dead = w.dead - 1,
           state = CASE WHEN w.state = 'failed' AND w.dead = 1 THEN 'running' ELSE w.state END,
           finished_at = CASE WHEN w.state = 'failed' AND w.dead = 1 THEN NULL ELSE w.finished_at END
     WHERE w.id = v_workflow_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER lonnymq_workflow_step_dead AFTER INSERT ON lonnymq_dead_message
    FOR EACH ROW WHEN (NEW.dedup_key LIKE 'lonnymq.step:%')
    EXECUTE FUNCTION lonnymq_workflow_step_dead_v1();
CREATE TRIGGER lonnymq_workflow_step_requeued AFTER DELETE ON lonnymq_dead_message
    FOR EACH ROW WHEN (OLD.dedup_key LIKE 'lonnymq.step:%')
    EXECUTE FUNCTION lonnymq_workflow_step_requeued_v1();

-- Cancel a workflow: its queued steps' messages are cancelled as lonnymq_cancel_v2 does
-- (waiting ones deleted, running ones marked), its waiting steps and the queued ones whose
-- message is gone become cancelled, and the workflow too. A running step ends dead as
-- 'cancelled' (or succeeds, releasing nothing). Returns the ids of the running steps marked
-- (NOTIFY lonnymq_cancel wakes their workers). A finished (succeeded) workflow is left alone.
CREATE FUNCTION lonnymq_workflow_cancel_v1(p_id bigint) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_state   text;
    v_ids     bigint[];
    v_late    bigint[];
    v_running bigint[];
BEGIN
    SELECT w.state INTO v_state FROM lonnymq_workflow w WHERE w.id = p_id;
    IF v_state IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('workflow_id', 'must name an existing workflow', p_id::text);
    END IF;
    IF v_state IN ('succeeded', 'cancelled') THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    -- Messages first (the ack's order: messages, steps, workflow).
    SELECT coalesce(pg_catalog.array_agg(s.id ORDER BY s.id), ARRAY[]::bigint[]) INTO v_ids
      FROM lonnymq_workflow_step s WHERE s.workflow_id = p_id AND s.state = 'queued';
    SELECT coalesce(pg_catalog.array_agg(c.id) FILTER (WHERE c.running), ARRAY[]::bigint[]) INTO v_running
      FROM lonnymq_cancel_v2(v_ids, true) c;
    PERFORM 1 FROM lonnymq_workflow_step s WHERE s.workflow_id = p_id ORDER BY s.id FOR UPDATE;
    -- Released after the first look (an ack that committed meanwhile): none can be now.
    SELECT pg_catalog.array_agg(s.id ORDER BY s.id) INTO v_late
      FROM lonnymq_workflow_step s WHERE s.workflow_id = p_id AND s.state = 'queued' AND s.id <> ALL (v_ids);
    IF v_late IS NOT NULL THEN
        SELECT v_running OPERATOR(pg_catalog.||) coalesce(pg_catalog.array_agg(c.id) FILTER (WHERE c.running), ARRAY[]::bigint[])
          INTO v_running FROM lonnymq_cancel_v2(v_late, true) c;
    END IF;
    UPDATE lonnymq_workflow_step s SET state = 'cancelled', payload = NULL, finished_at = pg_catalog.now()
     WHERE s.workflow_id = p_id
       AND (s.state = 'waiting'
            OR (s.state = 'queued' AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.id = s.id)));
    UPDATE lonnymq_workflow w SET state = 'cancelled', finished_at = pg_catalog.now()
     WHERE w.id = p_id AND w.state IN ('running', 'failed');
    IF pg_catalog.cardinality(v_running) > 0 THEN
        PERFORM pg_catalog.pg_notify('lonnymq_cancel', '');
    END IF;
    RETURN v_running;
END
$$;

-- Delete finished workflows (succeeded, cancelled, failed) finished before p_older_than_ms
-- ago, with their steps, edges and outputs, up to p_limit per call; a workflow with a step
-- message still queued, running or dead is kept. Returns how many were deleted.
CREATE FUNCTION lonnymq_workflow_prune_v1(p_older_than_ms bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n integer;
BEGIN
    PERFORM lonnymq_check_range_v1('older_than', p_older_than_ms, 0::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('limit', p_limit::bigint, 1::bigint, 100000::bigint, false);
    DELETE FROM lonnymq_workflow w
     WHERE w.id IN (
         SELECT x.id FROM lonnymq_workflow x
          WHERE x.finished_at < pg_catalog.clock_timestamp()
                                - pg_catalog.make_interval(secs => p_older_than_ms::double precision / 1000::double precision)
            AND NOT EXISTS (SELECT 1 FROM lonnymq_workflow_step s JOIN lonnymq_message m ON m.id = s.id
                             WHERE s.workflow_id = x.id)
            AND NOT EXISTS (SELECT 1 FROM lonnymq_workflow_step s JOIN lonnymq_dead_message d ON d.id = s.id
                             WHERE s.workflow_id = x.id)
          ORDER BY x.finished_at LIMIT p_limit
            FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- The workflow invariants api.check() adds: a waiting step whose parents have all succeeded
-- (it should have been released), a released step with a parent that has not succeeded.
CREATE FUNCTION lonnymq_workflow_check_v1()
RETURNS TABLE (workflow_id bigint, step_id bigint, queue text, channel text, problem text, detail text)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT s.workflow_id, s.id, s.queue, s.channel, 'workflow_step_not_released',
           pg_catalog.format('step %s of workflow %s waits, but its parents have all succeeded', s.name, s.workflow_id)
      FROM lonnymq_workflow_step s JOIN lonnymq_workflow w ON w.id = s.workflow_id
     WHERE s.state = 'waiting' AND w.state <> 'cancelled'
       AND NOT EXISTS (SELECT 1 FROM lonnymq_workflow_edge e JOIN lonnymq_workflow_step p ON p.id = e.parent_id
                        WHERE e.child_id = s.id AND p.state <> 'succeeded')
    UNION ALL
    SELECT s.workflow_id, s.id, s.queue, s.channel, 'workflow_step_released_early',
           pg_catalog.format('step %s of workflow %s was released, but its parent %s is %s', s.name, s.workflow_id,
                             p.name, p.state)
      FROM lonnymq_workflow_step s
      JOIN lonnymq_workflow_edge e ON e.child_id = s.id
      JOIN lonnymq_workflow_step p ON p.id = e.parent_id
     WHERE s.releases > 0 AND p.state <> 'succeeded'
$$;
