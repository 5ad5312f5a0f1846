-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0024: Snooze, a handler's wait that spends no attempt.
-- - lonnymq_message.snoozes and lonnymq_dead_message.snoozes (0 by default, CHECK >= 0).
-- - lonnymq_snooze_v1 (new): put a leased message back for a delay without counting the
--   attempt, its slots given back as a retry gives them; past a bound, a failed attempt.
-- - lonnymq_bury_v1 and lonnymq_requeue_dead_v1 (same contracts): carry snoozes to the dead
--   row and back.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

ALTER TABLE lonnymq_message ADD COLUMN snoozes integer NOT NULL DEFAULT 0;
ALTER TABLE lonnymq_message ADD CONSTRAINT lonnymq_message_snoozes_nonnegative CHECK (snoozes >= 0);
ALTER TABLE lonnymq_dead_message ADD COLUMN snoozes integer NOT NULL DEFAULT 0;
ALTER TABLE lonnymq_dead_message ADD CONSTRAINT lonnymq_dead_message_snoozes_nonnegative CHECK (snoozes >= 0);

-- Move locked, leased messages to the dead-letter table and give their slots back. A message
-- someone asked to cancel is buried as 'cancelled' whatever ended it, unless it was discarded.
CREATE OR REPLACE FUNCTION lonnymq_bury_v1(p_ids bigint[], p_reason text, p_error text) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_slots bigint[];
    v_queue_slots bigint[];
    v_n integer;
BEGIN
    WITH gone AS (
        DELETE FROM lonnymq_message m WHERE m.id = ANY (p_ids)
        RETURNING m.*
    ), dead AS (
        INSERT INTO lonnymq_dead_message (id, channel_id, queue, channel, payload, priority, attempts,
                                          max_attempts, dedup_key, enqueued_at, reason, last_error, snoozes)
        SELECT g.id, g.channel_id, c.queue, c.name, g.payload, g.priority, g.attempts, g.max_attempts,
               g.dedup_key, g.enqueued_at,
               CASE WHEN g.cancel_requested AND p_reason <> 'discarded' THEN 'cancelled' ELSE p_reason END,
               coalesce(p_error, g.last_error), g.snoozes
          FROM gone g JOIN lonnymq_channel c ON c.id = g.channel_id
        RETURNING 1
    )
    SELECT pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.slot_taken),
           pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.queue_slot), (SELECT pg_catalog.count(*) FROM dead)
      INTO v_slots, v_queue_slots, v_n FROM gone g;
    IF v_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_slots_v1(v_slots);
    END IF;
    IF v_queue_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_queue_slots_v1(v_queue_slots);
    END IF;
    RETURN coalesce(v_n, 0);
END
$$;
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
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    -- Channels first (created in name order if missing, then locked in id order), so
    -- requeues and enqueues over several channels take channel locks in one order.
    PERFORM lonnymq_channel_id_v1(x.queue, x.channel) FROM (
        SELECT DISTINCT d.queue, d.channel FROM lonnymq_dead_message d
         WHERE d.id = ANY (p_ids) ORDER BY d.queue, d.channel) x;
    PERFORM 1 FROM lonnymq_channel c
      JOIN (SELECT DISTINCT d.queue, d.channel FROM lonnymq_dead_message d WHERE d.id = ANY (p_ids)) x
        ON c.queue = x.queue AND c.name = x.channel
     ORDER BY c.id FOR NO KEY UPDATE OF c;
    FOR v_row IN
        SELECT d.* FROM lonnymq_dead_message d WHERE d.id = ANY (p_ids) ORDER BY d.id FOR UPDATE
    LOOP
        v_channel_id := lonnymq_channel_id_v1(v_row.queue, v_row.channel);
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(v_channel_id));
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
-- A handler asked to wait p_delay_ms (Snooze) without spending an attempt: the message goes
-- back exactly as a retry does (lonnymq_unlease_v1: channel and queue-wide slots given back,
-- the channel woken for the new dequeue_at, so the scheduler's invariants hold), with the
-- attempt its lease counted taken back and its snoozes counted. Past p_max_snoozes the
-- snooze is a failed attempt instead (lonnymq_fail_v2 with 'snoozed more than N times':
-- a retry with backoff, or dead when the attempts are used up). A message someone asked to
-- cancel is dead-lettered as 'cancelled'. Returns 'snoozed', 'retry' or 'dead'.
CREATE FUNCTION lonnymq_snooze_v1(
    p_id               bigint,
    p_token            uuid,
    p_delay_ms         bigint,
    p_max_snoozes      integer,
    p_backoff_base_ms  bigint  DEFAULT 1000,
    p_backoff_max_ms   bigint  DEFAULT 3600000,
    p_tolerance_ms     bigint  DEFAULT 50
) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_msg record;
BEGIN
    PERFORM lonnymq_check_range_v1('delay', p_delay_ms, 0::bigint, 3155760000000::bigint, false);
    PERFORM lonnymq_check_range_v1('max_snoozes', p_max_snoozes::bigint, 0::bigint, 2147483647::bigint, false);
    PERFORM lonnymq_check_range_v1('backoff_base', p_backoff_base_ms, 0::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('backoff_max', p_backoff_max_ms, 0::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    SELECT m.id, m.snoozes, m.lease_token, m.cancel_requested INTO v_msg
      FROM lonnymq_message m WHERE m.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % does not exist (acked, cancelled or dead)', p_id
            USING ERRCODE = 'LQ004';
    END IF;
    IF v_msg.lease_token IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION 'lease on message % is stale: it expired and the message was released again', p_id
            USING ERRCODE = 'LQ003';
    END IF;
    IF v_msg.cancel_requested THEN
        RETURN lonnymq_fail_v2(p_id, p_token, NULL, NULL, 'cancelled', p_backoff_base_ms, p_backoff_max_ms,
                               p_tolerance_ms);
    END IF;
    IF v_msg.snoozes >= p_max_snoozes THEN
        RETURN lonnymq_fail_v2(p_id, p_token, pg_catalog.format('snoozed more than %s times', p_max_snoozes),
                               NULL, 'failed', p_backoff_base_ms, p_backoff_max_ms, p_tolerance_ms);
    END IF;
    UPDATE lonnymq_message m SET snoozes = m.snoozes + 1 WHERE m.id = p_id;
    PERFORM lonnymq_unlease_v1(ARRAY[p_id], ARRAY[lonnymq_now_ms_v1() + p_delay_ms], NULL, true, p_tolerance_ms);
    RETURN 'snoozed';
END
$$;
