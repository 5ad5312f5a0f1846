-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0041: the last producers that held one shared advisory lock per channel
-- take them through lonnymq_lock_channels_v1 (0040): one per channel up to 64 channels, else
-- one per stripe, at most 1,024 slots of the server's lock table whatever the number of
-- channels. A requeue of the dead letters of 10,000 channels, a run_now() of messages in
-- 10,000 channels or a workflow whose root steps name 10,000 channels took 10,000.
-- - lonnymq_requeue_dead_v1: the channels' locks in one call after their rows are locked;
--   a channel deleted and created again meanwhile (a new id) is locked alone, as before.
-- - lonnymq_run_now_v1: the channels of the messages it moves, in one call.
-- - lonnymq_workflow_release_v1 (a start's root steps): the channels created in name order,
--   then their locks in one call.
-- Same names, arguments and results for the three functions replaced.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- Move dead messages back into their channel (recreated if it was deleted), ready now.
-- Returns the ids requeued (a message keeps its id).
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
        v_channel_id := lonnymq_channel_id_v1(v_row.queue, v_row.channel);
        -- A channel deleted after the locks above and created again since has a new id.
        IF v_locked IS NULL OR v_channel_id <> ALL (v_locked) THEN
            PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(v_channel_id));
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

-- Make waiting (scheduled or backed-off) messages ready now. Returns the ids moved.
CREATE OR REPLACE FUNCTION lonnymq_run_now_v1(p_ids bigint[], p_tolerance_ms bigint DEFAULT 50) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now bigint := lonnymq_now_ms_v1();
    v_ids bigint[];
    v_ch  record;
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    -- The producer's shared locks on the channels (at most 1,024, see lonnymq_lock_channels_v1).
    PERFORM lonnymq_lock_channels_v1(pg_catalog.array_agg(m.channel_id))
      FROM lonnymq_message m WHERE m.id = ANY (p_ids) AND m.lease_token IS NULL HAVING pg_catalog.count(*) > 0;
    WITH moved AS (
        UPDATE lonnymq_message m SET dequeue_at = v_now
         WHERE m.id = ANY (p_ids) AND m.lease_token IS NULL AND m.dequeue_at > v_now
        RETURNING m.id
    )
    SELECT coalesce(pg_catalog.array_agg(moved.id ORDER BY moved.id), ARRAY[]::bigint[]) INTO v_ids FROM moved;
    FOR v_ch IN
        SELECT DISTINCT m.channel_id, c.queue FROM lonnymq_message m
          JOIN lonnymq_channel c ON c.id = m.channel_id
         WHERE m.id = ANY (v_ids) ORDER BY m.channel_id
    LOOP
        IF lonnymq_wake_v1(v_ch.channel_id, v_now, p_tolerance_ms) THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_ch.queue);
        END IF;
    END LOOP;
    RETURN v_ids;
END
$$;

-- Put steps (locked by the caller, ready: pending = 0) into the message table, as an
-- enqueue would: channels created in name order, their shared advisory locks (per channel or
-- per stripe, lonnymq_lock_channels_v1), one wake-up mark per channel (which NOTIFYs the
-- queue's workers at commit).
CREATE OR REPLACE FUNCTION lonnymq_workflow_release_v1(p_ids bigint[], p_tolerance_ms bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now        bigint := lonnymq_now_ms_v1();
    v_group      record;
    v_channel_id bigint;
    v_channel_ids bigint[];
    v_n          integer := 0;
BEGIN
    IF p_ids IS NULL OR pg_catalog.cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    -- The channels (created in name order), then their shared locks in one call: at most
    -- 1,024, however many channels the roots of a workflow name.
    SELECT pg_catalog.array_agg(x.id) INTO v_channel_ids
      FROM (SELECT lonnymq_channel_id_v1(g.queue, g.channel) AS id
              FROM (SELECT DISTINCT s.queue, s.channel FROM lonnymq_workflow_step s
                     WHERE s.id = ANY (p_ids) AND s.state = 'waiting' AND s.pending = 0) g
             ORDER BY g.queue, g.channel) x;
    IF v_channel_ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM lonnymq_lock_channels_v1(v_channel_ids);
    FOR v_group IN
        SELECT s.queue, s.channel, pg_catalog.min(s.delay_ms) AS delay_ms
          FROM lonnymq_workflow_step s
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting' AND s.pending = 0
         GROUP BY s.queue, s.channel ORDER BY s.queue, s.channel
    LOOP
        v_channel_id := lonnymq_channel_id_v1(v_group.queue, v_group.channel);
        PERFORM lonnymq_hold_channels_v1(ARRAY[v_channel_id]);
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
