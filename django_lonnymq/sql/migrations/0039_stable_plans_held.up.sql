-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0039: the rest of a worker's calls on the messages it holds plan as 0038's
-- do, whatever the size of the tables when the plans were made. Same names, arguments and
-- results for all seven functions:
-- - lonnymq_extend_v2 (the heartbeat), lonnymq_fail_v2 (a failure, retry, timeout or
--   discard), lonnymq_snooze_v1, lonnymq_release_v1 (a worker giving back what it had not
--   started) and the three they call, lonnymq_unlease_v1, lonnymq_bury_v1 and
--   lonnymq_wake_v1: SET enable_seqscan = off and SET jit = off.
-- - lonnymq_unlease_v1 also finds the messages it puts back by "m.id = ANY (p_ids)": its join
--   to the ids, planned on a small table, read the whole primary key to hash it.
-- Planned in a session while the message table held one row, then run on 200,000 messages:
-- a heartbeat of 50 leases took 87 ms instead of 1.4, a retry 124 ms instead of 1.4, a
-- snooze 139 ms instead of 1.3, a worker's release of 50 leases 370 ms instead of 2, each
-- reading the whole message table (and the channel table) on every call.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- Make sure a channel will look at a message that becomes ready at p_dequeue_at.
-- Lowers next_dequeue_at only when it must (more than p_tolerance_ms later than needed), so
-- enqueues into a busy channel take no row lock. The caller holds the channel's shared
-- advisory lock (see docs/locking.md). Under REPEATABLE READ or SERIALIZABLE the lowering is
-- unconditional: the row lock then keeps dequeuers from parking the channel until commit.
CREATE OR REPLACE FUNCTION lonnymq_wake_v1(p_channel_id bigint, p_dequeue_at bigint, p_tolerance_ms bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        UPDATE lonnymq_channel c
           SET next_dequeue_at = greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at),
               turn = pg_catalog.nextval('lonnymq_turn_seq') * 100000
         WHERE c.id = p_channel_id
           AND (c.next_dequeue_at IS NULL
                OR c.next_dequeue_at > greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at)
                                       + p_tolerance_ms);
    ELSE
        UPDATE lonnymq_channel c
           SET next_dequeue_at = least(
                   coalesce(c.next_dequeue_at, 9223372036854775807),
                   greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at)),
               turn = CASE WHEN c.next_dequeue_at IS NULL
                             OR c.next_dequeue_at > greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at)
                           THEN pg_catalog.nextval('lonnymq_turn_seq') * 100000 ELSE c.turn END
         WHERE c.id = p_channel_id;
    END IF;
    RETURN FOUND;
END
$$;
-- Move locked, leased messages to the dead-letter table and give their slots back. A message
-- someone asked to cancel is buried as 'cancelled' whatever ended it, unless it was discarded.
CREATE OR REPLACE FUNCTION lonnymq_bury_v1(p_ids bigint[], p_reason text, p_error text) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
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
-- Put locked, leased messages back as ready at their new dequeue_at, give their slots back
-- and wake their channels (taking each channel's shared advisory lock, like an enqueue).
-- A message someone asked to cancel is buried as 'cancelled' instead: it never runs again.
CREATE OR REPLACE FUNCTION lonnymq_unlease_v1(
    p_ids bigint[], p_dequeue_ats bigint[], p_error text, p_uncount boolean, p_tolerance_ms bigint
) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_slots     bigint[];
    v_queue_slots bigint[];
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
    SELECT pg_catalog.array_agg(m.channel_id) FILTER (WHERE m.slot_taken),
           pg_catalog.array_agg(m.channel_id) FILTER (WHERE m.queue_slot) INTO v_slots, v_queue_slots
      FROM lonnymq_message m WHERE m.id = ANY (p_ids);
    UPDATE lonnymq_message m
       SET lease_until = NULL, lease_token = NULL, leased_by = NULL, slot_taken = false, queue_slot = false,
           dequeue_at = u.dequeue_at,
           attempts = CASE WHEN p_uncount THEN greatest(m.attempts - 1, 0) ELSE m.attempts END,
           last_error = coalesce(p_error, m.last_error)
      FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_dequeue_ats)) AS u(id, dequeue_at)
     WHERE m.id = ANY (p_ids) AND m.id = u.id;
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
    IF v_queue_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_queue_slots_v1(v_queue_slots);
    END IF;
END
$$;
-- Extend leases (heartbeat) and tell which of them someone asked to cancel. Returns a row per
-- id extended; a missing id lost its lease.
CREATE OR REPLACE FUNCTION lonnymq_extend_v2(p_ids bigint[], p_tokens uuid[], p_lease_ms bigint)
RETURNS TABLE (id bigint, cancel_requested boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
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
CREATE OR REPLACE FUNCTION lonnymq_fail_v2(
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
SET enable_seqscan = off
SET jit = off
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
-- A handler asked to wait p_delay_ms (Snooze) without spending an attempt: the message goes
-- back exactly as a retry does (lonnymq_unlease_v1: channel and queue-wide slots given back,
-- the channel woken for the new dequeue_at, so the scheduler's invariants hold), with the
-- attempt its lease counted taken back and its snoozes counted. Past p_max_snoozes the
-- snooze is a failed attempt instead (lonnymq_fail_v2 with 'snoozed more than N times':
-- a retry with backoff, or dead when the attempts are used up). A message someone asked to
-- cancel is dead-lettered as 'cancelled'. Returns 'snoozed', 'retry' or 'dead'.
CREATE OR REPLACE FUNCTION lonnymq_snooze_v1(
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
SET enable_seqscan = off
SET jit = off
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
-- Give leased messages back without counting the attempt (a worker shutting down before it
-- started them). Returns the ids released.
CREATE OR REPLACE FUNCTION lonnymq_release_v1(p_ids bigint[], p_tokens uuid[], p_tolerance_ms bigint DEFAULT 50)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_ids bigint[];
    v_ats bigint[];
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_list_v1('tokens', pg_catalog.array_ndims(p_tokens));
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    SELECT pg_catalog.array_agg(m.id ORDER BY m.id), pg_catalog.array_agg(m.dequeue_at ORDER BY m.id) INTO v_ids, v_ats
      FROM (SELECT mm.id, mm.dequeue_at FROM lonnymq_message mm
             WHERE mm.id = ANY (p_ids)
               AND (mm.id, mm.lease_token) IN (SELECT u.id, u.token FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_tokens)) AS u(id, token))
             ORDER BY mm.id FOR UPDATE) m;
    IF v_ids IS NULL THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    PERFORM lonnymq_unlease_v1(v_ids, v_ats, NULL, true, p_tolerance_ms);
    RETURN v_ids;
END
$$;
