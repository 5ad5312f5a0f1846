-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0014: running messages under control.
-- - lonnymq_message.cancel_requested: a running message someone asked to cancel; its worker
--   learns it from lonnymq_extend_v2 (the heartbeat), interrupts the handler and
--   dead-letters the message as 'cancelled'.
-- - Dead-letter reasons gain 'timeout' and 'cancelled'; lonnymq_fail_v2 takes the reason.
-- - lonnymq_cancel_v2 cancels waiting messages and marks running ones; an unknown id is an
--   error (LQ170) unless p_missing_ok.
-- - lonnymq_bury_v1 and lonnymq_unlease_v1: a message marked for cancelling never goes back
--   to ready (a retry, a release, an expired lease dead-letter it as 'cancelled').
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

ALTER TABLE lonnymq_message ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;
ALTER TABLE lonnymq_dead_message
    DROP CONSTRAINT lonnymq_dead_message_reason_known,
    ADD CONSTRAINT lonnymq_dead_message_reason_known
        CHECK (reason IN ('failed', 'discarded', 'lease_expired', 'timeout', 'cancelled'));

-- Move locked, leased messages to the dead-letter table and give their slots back. A message
-- someone asked to cancel is buried as 'cancelled' whatever ended it, unless it was discarded.
CREATE OR REPLACE FUNCTION lonnymq_bury_v1(p_ids bigint[], p_reason text, p_error text) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_slots bigint[];
    v_n integer;
BEGIN
    WITH gone AS (
        DELETE FROM lonnymq_message m WHERE m.id = ANY (p_ids)
        RETURNING m.*
    ), dead AS (
        INSERT INTO lonnymq_dead_message (id, channel_id, queue, channel, payload, priority, attempts,
                                          max_attempts, dedup_key, enqueued_at, reason, last_error)
        SELECT g.id, g.channel_id, c.queue, c.name, g.payload, g.priority, g.attempts, g.max_attempts,
               g.dedup_key, g.enqueued_at,
               CASE WHEN g.cancel_requested AND p_reason <> 'discarded' THEN 'cancelled' ELSE p_reason END,
               coalesce(p_error, g.last_error)
          FROM gone g JOIN lonnymq_channel c ON c.id = g.channel_id
        RETURNING 1
    )
    SELECT pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.slot_taken), (SELECT pg_catalog.count(*) FROM dead)
      INTO v_slots, v_n FROM gone g;
    IF v_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_slots_v1(v_slots);
    END IF;
    RETURN coalesce(v_n, 0);
END
$$;
-- Put locked, leased messages back as ready at their new dequeue_at, give their slots back
-- and wake their channels (taking each channel's shared advisory lock, like an enqueue).
-- A message someone asked to cancel is buried as 'cancelled' instead: it never runs again.
CREATE OR REPLACE FUNCTION lonnymq_unlease_v1(
    p_ids bigint[], p_dequeue_ats bigint[], p_error text, p_uncount boolean, p_tolerance_ms bigint
) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_slots     bigint[];
    v_cancelled bigint[];
    v_ch        record;
BEGIN
    -- Lock every channel row this call may touch, in id order, before touching any: giving
    -- slots back and waking channels must not take them in two different orders.
    PERFORM 1 FROM lonnymq_channel c
      WHERE c.id IN (SELECT m.channel_id FROM lonnymq_message m WHERE m.id = ANY (p_ids))
      ORDER BY c.id FOR NO KEY UPDATE;
    SELECT pg_catalog.array_agg(m.id) INTO v_cancelled
      FROM lonnymq_message m WHERE m.id = ANY (p_ids) AND m.cancel_requested;
    IF v_cancelled IS NOT NULL THEN
        PERFORM lonnymq_bury_v1(v_cancelled, 'cancelled', p_error);
    END IF;
    SELECT pg_catalog.array_agg(m.channel_id) FILTER (WHERE m.slot_taken) INTO v_slots
      FROM lonnymq_message m WHERE m.id = ANY (p_ids);
    UPDATE lonnymq_message m
       SET lease_until = NULL, lease_token = NULL, leased_by = NULL, slot_taken = false,
           dequeue_at = u.dequeue_at,
           attempts = CASE WHEN p_uncount THEN greatest(m.attempts - 1, 0) ELSE m.attempts END,
           last_error = coalesce(p_error, m.last_error)
      FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_dequeue_ats)) AS u(id, dequeue_at)
     WHERE m.id = u.id;
    IF v_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_slots_v1(v_slots);
    END IF;
    FOR v_ch IN
        SELECT m.channel_id, pg_catalog.min(m.dequeue_at) AS dequeue_at, pg_catalog.min(c.queue) AS queue
          FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
         WHERE m.id = ANY (p_ids)
         GROUP BY m.channel_id ORDER BY m.channel_id
    LOOP
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(v_ch.channel_id));
        IF lonnymq_wake_v1(v_ch.channel_id, v_ch.dequeue_at, p_tolerance_ms) THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_ch.queue);
        END IF;
    END LOOP;
END
$$;
-- Extend leases (heartbeat) and tell which of them someone asked to cancel. Returns a row per
-- id extended; a missing id lost its lease.
CREATE FUNCTION lonnymq_extend_v2(p_ids bigint[], p_tokens uuid[], p_lease_ms bigint)
RETURNS TABLE (id bigint, cancel_requested boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
BEGIN
    PERFORM lonnymq_check_range_v1('lease', p_lease_ms, 1::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_list_v1('tokens', pg_catalog.array_ndims(p_tokens));
    IF coalesce(pg_catalog.cardinality(p_ids), 0) <> coalesce(pg_catalog.cardinality(p_tokens), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('tokens', 'must have one token per id', pg_catalog.cardinality(p_tokens)::text);
    END IF;
    RETURN QUERY
        UPDATE lonnymq_message m SET lease_until = lonnymq_now_ms_v1() + p_lease_ms
         WHERE m.id = ANY (p_ids)
           AND (m.id, m.lease_token) IN (SELECT u.id, u.token FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_tokens)) AS u(id, token))
        RETURNING m.id, m.cancel_requested;
END
$$;
-- A handler failed, timed out, was cancelled, asked for a retry or to discard its message.
-- p_reason: 'failed' and 'timeout' retry with exponential backoff and jitter (or after
-- p_retry_delay_ms when given) until the attempts are used up, then dead-letter with that
-- reason; 'discarded' and 'cancelled' dead-letter at once. A message someone asked to
-- cancel is dead-lettered as 'cancelled' whatever the reason (unless discarded).
-- Returns 'retry' or 'dead'.
CREATE FUNCTION lonnymq_fail_v2(
    p_id               bigint,
    p_token            uuid,
    p_error            text    DEFAULT NULL,
    p_retry_delay_ms   bigint  DEFAULT NULL,
    p_reason           text    DEFAULT 'failed',
    p_backoff_base_ms  bigint  DEFAULT 1000,
    p_backoff_max_ms   bigint  DEFAULT 3600000,
    p_tolerance_ms     bigint  DEFAULT 50
) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_msg   record;
    v_delay bigint;
BEGIN
    IF p_reason IS NULL OR p_reason NOT IN ('failed', 'timeout', 'discarded', 'cancelled') THEN
        PERFORM lonnymq_raise_invalid_v1('reason', 'must be failed, timeout, discarded or cancelled',
                                         pg_catalog.quote_nullable(p_reason));
    END IF;
    PERFORM lonnymq_check_range_v1('retry_delay', p_retry_delay_ms, 0::bigint, 3155760000000::bigint, true);
    PERFORM lonnymq_check_range_v1('backoff_base', p_backoff_base_ms, 0::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('backoff_max', p_backoff_max_ms, 0::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    SELECT m.id, m.attempts, m.max_attempts, m.lease_token, m.cancel_requested INTO v_msg
      FROM lonnymq_message m WHERE m.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % does not exist (acked, cancelled or dead)', p_id
            USING ERRCODE = 'LQ004';
    END IF;
    IF v_msg.lease_token IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION 'lease on message % is stale: it expired and the message was released again', p_id
            USING ERRCODE = 'LQ003';
    END IF;
    IF p_reason IN ('discarded', 'cancelled') OR v_msg.cancel_requested OR v_msg.attempts >= v_msg.max_attempts THEN
        PERFORM lonnymq_bury_v1(ARRAY[p_id], p_reason, p_error);
        RETURN 'dead';
    END IF;
    IF p_retry_delay_ms IS NOT NULL THEN
        v_delay := p_retry_delay_ms;
    ELSE
        -- Equal jitter: half the exponential step for sure, the other half at random.
        -- In double precision: base * 2^40 would overflow bigint before least() caps it.
        v_delay := least(p_backoff_max_ms::double precision,
                         p_backoff_base_ms::double precision
                         * pg_catalog.power(2::double precision, least(v_msg.attempts - 1, 40)::double precision))::bigint;
        v_delay := v_delay / 2 + (pg_catalog.random() * (v_delay / 2)::double precision)::bigint;
    END IF;
    PERFORM lonnymq_unlease_v1(ARRAY[p_id], ARRAY[lonnymq_now_ms_v1() + v_delay], p_error, false, p_tolerance_ms);
    RETURN 'retry';
END
$$;
-- Cancel messages: one waiting (ready or scheduled) is deleted at once (and frees its dedup
-- key); one in flight is marked cancel_requested, and its worker interrupts the handler at
-- its next heartbeat and dead-letters it as 'cancelled'. An id that names no message fails
-- the whole call with LQ170 (nothing is cancelled) unless p_missing_ok. The message rows
-- are locked in id order first, so a message cannot finish between the check and the mark.
-- Returns a row per message cancelled or marked.
CREATE FUNCTION lonnymq_cancel_v2(p_ids bigint[], p_missing_ok boolean DEFAULT false)
RETURNS TABLE (id bigint, running boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_found   bigint[];
    v_running bigint[];
    v_missing bigint[];
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
            RAISE EXCEPTION 'cannot cancel message(s) %: not found (never enqueued, or already acked, cancelled or dead); nothing was cancelled',
                pg_catalog.array_to_string(v_missing, ', ', 'null')
                USING ERRCODE = 'LQ170', DETAIL = pg_catalog.array_to_string(v_missing, ',', 'null');
        END IF;
    END IF;
    UPDATE lonnymq_message m SET cancel_requested = true
     WHERE m.id = ANY (v_running) AND NOT m.cancel_requested;
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