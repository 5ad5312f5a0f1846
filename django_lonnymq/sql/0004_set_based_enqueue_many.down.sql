-- django-lonnymq 0004, reversed: lonnymq_mark_many_v1 and lonnymq_enqueue_many_v1 as 0001
-- installed them (a mark per call and channel; a scratch table for every batch that has a
-- schedule, a priority or a dedup key), lonnymq_delete_channel_v1 as 0003 did.

-- The same for many channels (distinct ids, each with the earliest time it needs), in one
-- statement: enqueue_many's wake-up.
CREATE OR REPLACE FUNCTION lonnymq_mark_many_v1(p_queue text, p_channel_ids bigint[], p_dequeue_ats bigint[],
                                     p_tolerance_ms bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_marked integer;
BEGIN
    INSERT INTO lonnymq_wake AS w (queue, channel_id, dequeue_at)
    SELECT p_queue, c.id, u.at
      FROM unnest(p_channel_ids, p_dequeue_ats) AS u(id, at)
      JOIN lonnymq_channel c ON c.id = u.id AND c.id = ANY (p_channel_ids)
     WHERE current_setting('transaction_isolation') <> 'read committed'
        OR c.next_dequeue_at IS NULL
        OR c.next_dequeue_at > greatest(u.at, c.last_dequeue_at + c.release_interval_ms) + p_tolerance_ms
    ON CONFLICT (channel_id, xact) DO UPDATE SET dequeue_at = excluded.dequeue_at
        WHERE excluded.dequeue_at < w.dequeue_at;
    GET DIAGNOSTICS v_marked = ROW_COUNT;
    IF v_marked > 0 THEN
        PERFORM pg_notify('lonnymq_wakeup', p_queue);
    END IF;
    RETURN v_marked > 0;
END
$$;


-- Many messages of one queue, any channels, in one call.
CREATE OR REPLACE FUNCTION lonnymq_enqueue_many_v1(
    p_queue            text,
    p_channels         text[],
    p_payloads         jsonb[],
    p_run_at_ms        bigint[]  DEFAULT NULL,
    p_delay_ms         bigint[]  DEFAULT NULL,
    p_priorities       integer[] DEFAULT NULL,
    p_dedup_keys       text[]    DEFAULT NULL,
    p_max_attempts     integer[] DEFAULT NULL,
    p_default_max_attempts integer DEFAULT 5,
    p_priority_step_ms bigint    DEFAULT 1000,
    p_tolerance_ms     bigint    DEFAULT 50
) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    v_now      bigint := lonnymq_now_ms_v1();
    v_n        integer := coalesce(cardinality(p_payloads), 0);
    v_ids      bigint[];
    v_bad      record;
    v_inserted integer;
    v_wake_ids bigint[];
    v_wake_ats bigint[];
    v_fast_ids   bigint[];
    v_fast_names text[];
BEGIN
    IF coalesce(cardinality(p_channels), 0) <> v_n
       OR (p_run_at_ms IS NOT NULL AND cardinality(p_run_at_ms) <> v_n)
       OR (p_delay_ms IS NOT NULL AND cardinality(p_delay_ms) <> v_n)
       OR (p_priorities IS NOT NULL AND cardinality(p_priorities) <> v_n)
       OR (p_dedup_keys IS NOT NULL AND cardinality(p_dedup_keys) <> v_n)
       OR (p_max_attempts IS NOT NULL AND cardinality(p_max_attempts) <> v_n) THEN
        PERFORM lonnymq_raise_invalid_v1('items', 'arrays must all have the same length', v_n::text);
    END IF;
    IF v_n = 0 THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    IF p_queue IS NULL OR char_length(p_queue) NOT BETWEEN 1 AND 100 THEN
        PERFORM lonnymq_check_names_v1(p_queue, 'x');
    END IF;

    -- Fast path: no schedule, priority or dedup key in the batch (NULL arrays), every row
    -- valid. Set-based, no scratch table: channels, shared locks, one INSERT, wake-ups.
    IF p_run_at_ms IS NULL AND p_delay_ms IS NULL AND p_priorities IS NULL AND p_dedup_keys IS NULL
       AND NOT EXISTS (
           SELECT 1 FROM unnest(p_channels, p_payloads,
                                coalesce(p_max_attempts, array_fill(p_default_max_attempts, ARRAY[v_n])))
                         AS u(channel, payload, max_attempts)
            WHERE u.channel IS NULL OR char_length(u.channel) NOT BETWEEN 1 AND 200 OR u.payload IS NULL
               OR u.max_attempts IS NULL OR u.max_attempts NOT BETWEEN 1 AND 1000) THEN
        INSERT INTO lonnymq_channel (queue, name)
        SELECT DISTINCT p_queue, u.name FROM unnest(p_channels) AS u(name)
         WHERE NOT EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.queue = p_queue AND c.name = u.name)
         ORDER BY 2
        ON CONFLICT (queue, name) DO NOTHING;
        SELECT array_agg(c.id ORDER BY c.id), array_agg(c.name ORDER BY c.id) INTO v_fast_ids, v_fast_names
          FROM lonnymq_channel c WHERE c.queue = p_queue AND c.name = ANY (p_channels);
        IF coalesce(cardinality(v_fast_ids), 0) < (SELECT count(DISTINCT u.name) FROM unnest(p_channels) AS u(name)) THEN
            RAISE EXCEPTION 'a channel of queue % was created concurrently; retry the transaction', p_queue
                USING ERRCODE = '40001';
        END IF;
        PERFORM pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(f.id))
           FROM unnest(v_fast_ids) AS f(id) ORDER BY f.id;
        WITH ins AS (
            INSERT INTO lonnymq_message (channel_id, payload, dequeue_at, priority, max_attempts)
            SELECT f.id, u.payload, v_now, 0, u.max_attempts
              FROM unnest(p_channels, p_payloads,
                          coalesce(p_max_attempts, array_fill(p_default_max_attempts, ARRAY[v_n])))
                   WITH ORDINALITY AS u(channel, payload, max_attempts, ord)
              JOIN unnest(v_fast_ids, v_fast_names) AS f(id, name) ON f.name = u.channel
             ORDER BY u.ord
            RETURNING lonnymq_message.id
        )
        SELECT array_agg(ins.id ORDER BY ins.id) INTO v_ids FROM ins;  -- ids follow input order
        PERFORM lonnymq_mark_many_v1(p_queue, v_fast_ids, array_fill(v_now, ARRAY[cardinality(v_fast_ids)]),
                                     p_tolerance_ms);
        RETURN v_ids;
    END IF;

    -- A session-local scratch table: the batch is read several times below.
    IF to_regclass('pg_temp.lonnymq_enqueue_rows') IS NULL THEN
        CREATE TEMP TABLE lonnymq_enqueue_rows (
            ord bigint, channel text, channel_id bigint, payload jsonb, dequeue_at bigint,
            priority integer, dedup_key text, max_attempts integer, new_id bigint
        ) ON COMMIT DELETE ROWS;
    ELSE
        DELETE FROM lonnymq_enqueue_rows;
    END IF;

    INSERT INTO lonnymq_enqueue_rows (ord, channel, payload, dequeue_at, priority, dedup_key, max_attempts, new_id)
    SELECT u.ord, u.channel, u.payload,
           lonnymq_dequeue_at_v1(v_now, u.run_at, u.delay, coalesce(u.priority, 0), p_priority_step_ms),
           coalesce(u.priority, 0), u.dedup_key, coalesce(u.max_attempts, p_default_max_attempts),
           nextval('lonnymq_message_id_seq')
      FROM unnest(p_channels, p_payloads,
                  coalesce(p_run_at_ms, array_fill(NULL::bigint, ARRAY[v_n])),
                  coalesce(p_delay_ms, array_fill(NULL::bigint, ARRAY[v_n])),
                  coalesce(p_priorities, array_fill(NULL::integer, ARRAY[v_n])),
                  coalesce(p_dedup_keys, array_fill(NULL::text, ARRAY[v_n])),
                  coalesce(p_max_attempts, array_fill(NULL::integer, ARRAY[v_n])))
           WITH ORDINALITY AS u(channel, payload, run_at, delay, priority, dedup_key, max_attempts, ord);

    SELECT * INTO v_bad FROM lonnymq_enqueue_rows r
     WHERE r.channel IS NULL OR char_length(r.channel) NOT BETWEEN 1 AND 200
        OR r.payload IS NULL
        OR r.max_attempts NOT BETWEEN 1 AND 1000
        OR (r.dedup_key IS NOT NULL AND char_length(r.dedup_key) NOT BETWEEN 1 AND 200)
     ORDER BY r.ord LIMIT 1;
    IF FOUND THEN
        IF v_bad.channel IS NULL OR char_length(v_bad.channel) NOT BETWEEN 1 AND 200 THEN
            PERFORM lonnymq_raise_invalid_v1(format('items[%s].channel', v_bad.ord - 1),
                'must be 1 to 200 characters', quote_nullable(v_bad.channel));
        ELSIF v_bad.payload IS NULL THEN
            PERFORM lonnymq_raise_invalid_v1(format('items[%s].payload', v_bad.ord - 1), 'must not be null', NULL);
        ELSIF v_bad.max_attempts NOT BETWEEN 1 AND 1000 THEN
            PERFORM lonnymq_raise_invalid_v1(format('items[%s].max_attempts', v_bad.ord - 1),
                'must be between 1 and 1000', v_bad.max_attempts::text);
        ELSE
            PERFORM lonnymq_raise_invalid_v1(format('items[%s].dedup_key', v_bad.ord - 1),
                'must be 1 to 200 characters', quote_literal(v_bad.dedup_key));
        END IF;
    END IF;

    -- Create missing channels in name order (concurrent batches wait on each other in one order).
    INSERT INTO lonnymq_channel (queue, name)
    SELECT DISTINCT p_queue, r.channel FROM lonnymq_enqueue_rows r
     WHERE NOT EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.queue = p_queue AND c.name = r.channel)
     ORDER BY 2
    ON CONFLICT (queue, name) DO NOTHING;

    UPDATE lonnymq_enqueue_rows r SET channel_id = c.id
      FROM lonnymq_channel c WHERE c.queue = p_queue AND c.name = r.channel;
    IF EXISTS (SELECT 1 FROM lonnymq_enqueue_rows WHERE channel_id IS NULL) THEN
        RAISE EXCEPTION 'a channel of queue % was created concurrently; retry the transaction', p_queue
            USING ERRCODE = '40001';
    END IF;

    -- Shared advisory locks in channel id order ("an enqueue into this channel is in flight").
    PERFORM pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(x.channel_id))
       FROM (SELECT DISTINCT channel_id FROM lonnymq_enqueue_rows ORDER BY 1) x;

    -- Dedup keys: the first row of a key in this batch claims it, in one global order. The
    -- insert reports, per channel, the earliest dequeue_at it added (for the wake below).
    WITH claimed AS (
        INSERT INTO lonnymq_dedup (channel_id, dedup_key, message_id)
        SELECT DISTINCT ON (r.channel_id, r.dedup_key) r.channel_id, r.dedup_key, r.new_id
          FROM lonnymq_enqueue_rows r
         WHERE r.dedup_key IS NOT NULL
         ORDER BY r.channel_id, r.dedup_key, r.ord
        ON CONFLICT (channel_id, dedup_key) DO NOTHING
        RETURNING message_id
    ), inserted AS (
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
        SELECT r.new_id, r.channel_id, r.payload, r.dequeue_at, r.priority, r.max_attempts, r.dedup_key
          FROM lonnymq_enqueue_rows r
         WHERE r.dedup_key IS NULL OR r.new_id IN (SELECT message_id FROM claimed)
        RETURNING channel_id, dequeue_at
    )
    SELECT coalesce(sum(w.n), 0)::integer, array_agg(w.channel_id ORDER BY w.channel_id),
           array_agg(w.at ORDER BY w.channel_id)
      INTO v_inserted, v_wake_ids, v_wake_ats
      FROM (SELECT i.channel_id, min(i.dequeue_at) AS at, count(*) AS n FROM inserted i GROUP BY i.channel_id) w;

    -- Ids in input order. Rows whose key was already taken get the existing id, looked up
    -- one index probe per row (a new statement sees the commits ON CONFLICT waited for).
    IF v_inserted = v_n THEN
        SELECT array_agg(r.new_id ORDER BY r.ord) INTO v_ids FROM lonnymq_enqueue_rows r;
    ELSE
        SELECT array_agg(coalesce((SELECT d.message_id FROM lonnymq_dedup d
                                    WHERE r.dedup_key IS NOT NULL
                                      AND d.channel_id = r.channel_id AND d.dedup_key = r.dedup_key),
                                   r.new_id) ORDER BY r.ord)
          INTO v_ids FROM lonnymq_enqueue_rows r;
    END IF;

    -- Mark the channels that need waking (no row lock).
    IF v_wake_ids IS NOT NULL THEN
        PERFORM lonnymq_mark_many_v1(p_queue, v_wake_ids, v_wake_ats, p_tolerance_ms);
    END IF;
    DELETE FROM lonnymq_enqueue_rows;
    RETURN v_ids;
END
$$;


-- Delete an empty channel that no one holds (admin), as 0003 installed it.
CREATE OR REPLACE FUNCTION lonnymq_delete_channel_v1(p_id bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM 1 FROM lonnymq_channel c WHERE c.id = p_id;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    SELECT c.id INTO v_id FROM lonnymq_channel c WHERE c.id = p_id FOR UPDATE SKIP LOCKED;
    IF v_id IS NULL
       OR NOT pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(p_id)) THEN
        RETURN 'busy';
    END IF;
    IF EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.channel_id = p_id AND m.lease_until IS NULL)
       OR EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.lease_until IS NOT NULL AND m.channel_id = p_id) THEN
        RETURN 'not_empty';
    END IF;
    DELETE FROM lonnymq_channel c WHERE c.id = p_id;
    RETURN 'deleted';
END
$$;
