-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0054: a message that holds its ordered channel (a retry, a snooze, a durable
-- sleep or wait keep it at the head and hold the channel until its new time) runs at once when
-- an operator runs it now or resumes it (lonnymq_run_now_v1, which lonnymq_resume_v1 calls) or
-- when the event it waits for is emitted (lonnymq_emit_event_v1): lonnymq_lift_holds_v1 ends
-- the hold. Before, such a channel stayed held until the old time (for a wait without a
-- timeout, the year 9999). Functions only.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- Strict order: the ordered channels whose hold (a retry, a snooze, a durable sleep or wait:
-- lonnymq_unlease_v1 keeps the message at the head and holds the channel until its new time)
-- is held by one of these waiting messages, their head, lose the hold now, so the message runs
-- first; a dead message's block (blocked_by) stays. Channel rows are locked in id order.
-- Returns the channels and the messages that hold them no more. For lonnymq_run_now_v1
-- (and resume) and lonnymq_emit_event_v1.
CREATE FUNCTION lonnymq_lift_holds_v1(p_ids bigint[])
RETURNS TABLE (channel_id bigint, queue text, message_id bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_now bigint := lonnymq_now_ms_v1();
BEGIN
    RETURN QUERY
        WITH held AS (
            SELECT c.id, m.id AS message_id
              FROM lonnymq_message m
              JOIN lonnymq_channel c ON c.id = m.channel_id
             WHERE m.id = ANY (p_ids) AND m.lease_until IS NULL
               AND c.ordered AND c.blocked_by IS NULL AND c.hold_until > v_now
               AND m.id = (SELECT h.id FROM lonnymq_message h
                            WHERE h.channel_id = m.channel_id AND h.lease_until IS NULL
                            ORDER BY h.dequeue_at, h.id LIMIT 1)
             ORDER BY c.id
               FOR NO KEY UPDATE OF c
        ), lifted AS (
            UPDATE lonnymq_channel c SET hold_until = NULL
              FROM held WHERE c.id = held.id
            RETURNING c.id, c.queue, held.message_id
        )
        SELECT l.id, l.queue, l.message_id FROM lifted l ORDER BY l.id;
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
    -- A message that holds its ordered channel (it kept its place at the head) runs now too.
    SELECT pg_catalog.array_agg(u.id ORDER BY u.id) INTO v_ids
      FROM (SELECT pg_catalog.unnest(v_ids) UNION SELECT l.message_id FROM lonnymq_lift_holds_v1(p_ids) l) u(id);
    v_ids := coalesce(v_ids, ARRAY[]::bigint[]);
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

-- Emit the event p_key, in the caller's transaction: the first emit of a key is stored
-- (a later one, while the first is kept, changes nothing and returns NULL); its waiters get
-- the payload and are made due now, which they see when the caller commits (a rollback
-- wakes nobody). Waiters are found through lonnymq_step_waiting_idx. Their channels are
-- woken as an enqueue wakes them (a mark, no channel row lock held until the caller's
-- commit). Returns the ids of the waiting messages it woke.
CREATE OR REPLACE FUNCTION lonnymq_emit_event_v1(p_key text, p_payload jsonb, p_tolerance_ms bigint DEFAULT 50)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now bigint := lonnymq_now_ms_v1();
    v_ids bigint[];
    v_ch  record;
BEGIN
    IF p_key IS NULL OR pg_catalog.char_length(p_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM lonnymq_raise_invalid_v1('key', 'must be 1 to 200 characters', coalesce(pg_catalog.quote_literal(p_key), 'NULL'));
    END IF;
    IF p_payload IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('payload', 'must not be SQL NULL (JSON null is jsonb ''null'')', 'NULL');
    ELSIF pg_catalog.jsonb_path_exists(p_payload, 'strict $.**{101}'::jsonpath) THEN
        PERFORM lonnymq_raise_too_deep_v1('payload'::text, p_payload);
    ELSIF pg_catalog.pg_column_size(p_payload) > 1048576 THEN
        PERFORM lonnymq_raise_invalid_v1('payload', 'must be at most 1 MiB stored', pg_catalog.pg_column_size(p_payload)::text);
    END IF;
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_event_lock_ns_v1(), pg_catalog.hashtext(p_key));
    INSERT INTO lonnymq_event (key, payload) VALUES (p_key, p_payload) ON CONFLICT (key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    WITH woken AS (
        UPDATE lonnymq_step s SET done = true, result = p_payload
         WHERE s.event_key = p_key AND s.kind = 'wait' AND NOT s.done
        RETURNING s.message_id
    )
    SELECT pg_catalog.array_agg(woken.message_id ORDER BY woken.message_id) INTO v_ids FROM woken;
    IF v_ids IS NULL THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    -- The producer's shared locks on the channels, then the messages: a suspended one is
    -- made due now (a running one is not touched: its worker's suspend finds the row done).
    PERFORM lonnymq_lock_channels_v1(pg_catalog.array_agg(m.channel_id))
       FROM lonnymq_message m WHERE m.id = ANY (v_ids) AND m.lease_token IS NULL HAVING pg_catalog.count(*) > 0;
    FOR v_ch IN
        WITH moved AS (
            UPDATE lonnymq_message m SET dequeue_at = v_now
             WHERE m.id = ANY (v_ids) AND m.lease_until IS NULL AND m.lease_token IS NULL AND m.dequeue_at > v_now
            RETURNING m.channel_id
        )
        SELECT DISTINCT moved.channel_id, c.queue FROM moved JOIN lonnymq_channel c ON c.id = moved.channel_id
         ORDER BY moved.channel_id
    LOOP
        PERFORM lonnymq_mark_v1(v_ch.queue, v_ch.channel_id, v_now, p_tolerance_ms);
    END LOOP;
    -- A waiter that holds its ordered channel kept its place at the head: the hold ends now.
    FOR v_ch IN SELECT l.channel_id, l.queue FROM lonnymq_lift_holds_v1(v_ids) l LOOP
        PERFORM lonnymq_mark_v1(v_ch.queue, v_ch.channel_id, v_now, p_tolerance_ms);
    END LOOP;
    RETURN v_ids;
END
$$;
