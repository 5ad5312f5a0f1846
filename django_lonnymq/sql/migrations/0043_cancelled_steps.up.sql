-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0043: cancelling a workflow's step settles its workflow, and a cancelled
-- workflow's steps stay dead.
-- - New: lonnymq_cancel_v3 (api.cancel): a waiting step's message goes to the dead letters as
--   'cancelled' (its workflow fails, as when a running step is cancelled) instead of being
--   deleted, which left its workflow running for good. lonnymq_cancel_v2 stays (a workflow's
--   own cancel calls it).
-- - lonnymq_requeue_dead_v1 leaves a step of a cancelled workflow dead (and out of its
--   result): run again, it released nothing and its workflow stayed cancelled.
-- - lonnymq_workflow_check_v1 reports a queued step of a live workflow whose message is gone
--   and not dead (workflow_step_lost: a purge deleted it).
-- Same names, arguments and results for the two functions replaced.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- Move dead messages back into their channel (recreated if it was deleted), ready now.
-- Returns the ids requeued (a message keeps its id). A step of a cancelled workflow stays
-- dead and is left out of the result: run again, it would release nothing, and its workflow
-- would stay cancelled.
CREATE OR REPLACE FUNCTION lonnymq_requeue_dead_v1(
    p_ids bigint[], p_reset_attempts boolean DEFAULT true, p_tolerance_ms bigint DEFAULT 50
) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now bigint := lonnymq_now_ms_v1();
    v_row record;
    v_ids bigint[] := ARRAY[]::bigint[];
    v_channel_id bigint;
    v_locked bigint[];
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    -- Channels first (created in name order if missing, then locked in id order), so
    -- requeues and enqueues over several channels take channel locks in one order.
    PERFORM lonnymq_channel_id_v1(x.queue, x.channel) FROM (
        SELECT DISTINCT d.queue, d.channel FROM lonnymq_dead_message d
         WHERE d.id = ANY (p_ids) ORDER BY d.queue, d.channel) x;
    SELECT pg_catalog.array_agg(l.id ORDER BY l.id) INTO v_locked
      FROM (SELECT c.id FROM lonnymq_channel c
              JOIN (SELECT DISTINCT d.queue, d.channel FROM lonnymq_dead_message d WHERE d.id = ANY (p_ids)) x
                ON c.queue = x.queue AND c.name = x.channel
             ORDER BY c.id FOR NO KEY UPDATE OF c) l;
    -- The producer's shared locks, at most 1,024 however many channels (a requeue of every
    -- dead letter of a queue with 100,000 tenants took one each, from the server's lock table).
    IF v_locked IS NOT NULL THEN
        PERFORM lonnymq_lock_channels_v1(v_locked);
    END IF;
    FOR v_row IN
        SELECT d.* FROM lonnymq_dead_message d WHERE d.id = ANY (p_ids) ORDER BY d.id FOR UPDATE
    LOOP
        IF pg_catalog.starts_with(v_row.dedup_key, 'lonnymq.step:') THEN
            -- The step's row first (a workflow's cancel locks its steps, then the workflow):
            -- the state read next, in a statement of its own, sees a cancel that committed
            -- while this waited; a cancel that starts now finds the step queued again.
            PERFORM 1 FROM lonnymq_workflow_step s WHERE s.id = v_row.id FOR UPDATE;
            IF EXISTS (SELECT 1 FROM lonnymq_workflow_step s JOIN lonnymq_workflow w ON w.id = s.workflow_id
                        WHERE s.id = v_row.id AND w.state = 'cancelled') THEN
                CONTINUE;
            END IF;
        END IF;
        v_channel_id := lonnymq_channel_id_v1(v_row.queue, v_row.channel);
        -- A channel deleted after the locks above and created again since has a new id.
        IF v_locked IS NULL OR v_channel_id <> ALL (v_locked) THEN
            PERFORM lonnymq_lock_channel_v1(v_channel_id);
        END IF;
        -- Held already, unless it was deleted after the lock above and created again since.
        PERFORM lonnymq_hold_channels_v1(ARRAY[v_channel_id]);
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, attempts,
                                     max_attempts, dedup_key, enqueued_at, last_error, snoozes)
        VALUES (v_row.id, v_channel_id, v_row.payload, v_now, v_row.priority,
                CASE WHEN p_reset_attempts THEN 0 ELSE v_row.attempts END,
                CASE WHEN p_reset_attempts THEN v_row.max_attempts
                     ELSE greatest(v_row.max_attempts, v_row.attempts + 1) END,
                v_row.dedup_key, v_row.enqueued_at, v_row.last_error,
                CASE WHEN p_reset_attempts THEN 0 ELSE v_row.snoozes END);
        DELETE FROM lonnymq_dead_message d WHERE d.id = v_row.id;
        IF lonnymq_wake_v1(v_channel_id, v_now, p_tolerance_ms) THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_row.queue);
        END IF;
        v_ids := v_ids OPERATOR(pg_catalog.||) v_row.id;
    END LOOP;
    RETURN v_ids;
END
$$;

-- lonnymq_cancel_v2, for api.cancel: a waiting message that is a workflow step goes to the
-- dead letters as 'cancelled' instead of being deleted, so that its workflow fails as it does
-- when a running step is cancelled (lonnymq_workflow_cancel_v1 keeps calling _v2: a workflow's
-- own cancel deletes its waiting steps' messages).
CREATE FUNCTION lonnymq_cancel_v3(p_ids bigint[], p_missing_ok boolean DEFAULT false)
RETURNS TABLE (id bigint, running boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_found   bigint[];
    v_running bigint[];
    v_missing bigint[];
    v_steps   bigint[];
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    SELECT coalesce(pg_catalog.array_agg(l.id), ARRAY[]::bigint[]),
           coalesce(pg_catalog.array_agg(l.id) FILTER (WHERE l.leased), ARRAY[]::bigint[])
      INTO v_found, v_running
      FROM (SELECT m.id, m.lease_token IS NOT NULL AS leased FROM lonnymq_message m
             WHERE m.id = ANY (p_ids) ORDER BY m.id FOR UPDATE) l;
    IF NOT coalesce(p_missing_ok, false) THEN
        SELECT pg_catalog.array_agg(DISTINCT u.id ORDER BY u.id) INTO v_missing
          FROM pg_catalog.unnest(p_ids) AS u(id)
         WHERE u.id IS NULL OR u.id <> ALL (v_found);
        IF v_missing IS NOT NULL THEN
            -- The message names the first 20 (a call may name a million); DETAIL has them all.
            RAISE EXCEPTION 'cannot cancel % message(s): not found (never enqueued, or already acked, cancelled or dead); nothing was cancelled: %',
                pg_catalog.cardinality(v_missing),
                pg_catalog.array_to_string(v_missing[1:20], ', ', 'null')
                    OPERATOR(pg_catalog.||) CASE WHEN pg_catalog.cardinality(v_missing) > 20
                        THEN pg_catalog.format(' and %s more', pg_catalog.cardinality(v_missing) - 20) ELSE '' END
                USING ERRCODE = 'LQ170', DETAIL = pg_catalog.array_to_string(v_missing, ',', 'null');
        END IF;
    END IF;
    UPDATE lonnymq_message m SET cancel_requested = true
     WHERE m.id = ANY (v_running) AND NOT m.cancel_requested;
    -- A waiting workflow step goes to the dead letters as 'cancelled', as a running one does
    -- when its worker stops it: its workflow fails (lonnymq_workflow_step_dead_v1), where a
    -- deleted step would leave it running for good, and requeue_dead brings it back.
    SELECT pg_catalog.array_agg(m.id ORDER BY m.id) INTO v_steps FROM lonnymq_message m
     WHERE m.id = ANY (v_found) AND m.lease_token IS NULL
       AND pg_catalog.starts_with(m.dedup_key, 'lonnymq.step:');
    IF v_steps IS NOT NULL THEN
        PERFORM lonnymq_bury_v1(v_steps, 'cancelled', NULL);
    END IF;
    WITH gone AS (
        DELETE FROM lonnymq_message m
         WHERE m.id = ANY (v_found) AND m.lease_token IS NULL
        RETURNING m.id, m.channel_id, m.dedup_key
    )
    DELETE FROM lonnymq_dedup d USING gone g
     WHERE d.channel_id = g.channel_id AND d.dedup_key = g.dedup_key AND d.message_id = g.id;
    RETURN QUERY
        SELECT f.id, f.id = ANY (v_running) FROM pg_catalog.unnest(v_found) AS f(id) ORDER BY f.id;
END
$$;

-- The workflow invariants api.check() adds: a waiting step whose parents have all succeeded
-- (it should have been released), a released step with a parent that has not succeeded, a
-- step whose workflow is missing (steps have no foreign key since 0037), a queued step of a
-- live workflow whose message is neither in the message table nor dead (a purge deleted it).
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
    UNION ALL
    SELECT s.workflow_id, s.id, s.queue, s.channel, 'workflow_step_lost',
           pg_catalog.format('step %s of workflow %s is queued, but its message is gone (purged or deleted) '
                             'and not dead: the workflow cannot finish (cancel it)', s.name, s.workflow_id)
      FROM lonnymq_workflow_step s JOIN lonnymq_workflow w ON w.id = s.workflow_id
     WHERE s.state = 'queued' AND w.state <> 'cancelled'
       AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.id = s.id)
       AND NOT EXISTS (SELECT 1 FROM lonnymq_dead_message d WHERE d.id = s.id)
$$;
