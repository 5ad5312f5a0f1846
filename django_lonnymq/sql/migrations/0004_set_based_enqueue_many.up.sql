-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0004: lonnymq_enqueue_many_v1 runs every valid batch as one set-based
-- statement, dedup keys, run times, delays and priorities included (0001 did so only for
-- batches of plain messages and staged the rest in a scratch table with a function call per
-- row). That is the path of the Spark export, which sends a dedup key for every row. Same
-- signature, results and errors.
-- lonnymq_mark_many_v1 leaves no second mark for a channel that has a committed one early
-- enough (a producer writing chunk after chunk leaves one mark per channel, not per chunk).
-- lonnymq_delete_channel_v1 deletes the channel's wake-up marks with it.


-- The same for many channels (distinct ids, each with the earliest time it needs), in one
-- statement: enqueue_many's wake-up. Under READ COMMITTED a channel that already has a
-- committed mark early enough needs no other: the next dequeue applies that mark, and while
-- this transaction holds the channel's shared advisory lock no dequeuer parks the channel
-- (docs/locking.md). So a producer that writes chunk after chunk into channels no worker has
-- looked at yet leaves one mark per channel, not one per chunk.
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
        OR ((c.next_dequeue_at IS NULL
             OR c.next_dequeue_at > greatest(u.at, c.last_dequeue_at + c.release_interval_ms) + p_tolerance_ms)
            AND NOT EXISTS (SELECT 1 FROM lonnymq_wake m
                             WHERE m.channel_id = c.id AND m.dequeue_at <= u.at + p_tolerance_ms))
    ON CONFLICT (channel_id, xact) DO UPDATE SET dequeue_at = excluded.dequeue_at
        WHERE excluded.dequeue_at < w.dequeue_at;
    GET DIAGNOSTICS v_marked = ROW_COUNT;
    IF v_marked > 0 THEN
        PERFORM pg_notify('lonnymq_wakeup', p_queue);
    END IF;
    RETURN v_marked > 0;
END
$$;


-- Many messages of one queue, any channels, in one call. Returns the ids in input order (the
-- existing id where a dedup key repeats, also within the batch). NULL arrays mean "defaults
-- for every row". Channels are created in name order and locked in id order, and dedup keys
-- are claimed in (channel, key) order, so concurrent batches never deadlock, whatever their
-- row order.
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
    v_now            bigint := lonnymq_now_ms_v1();
    v_n              integer := coalesce(cardinality(p_payloads), 0);
    v_bad            record;
    v_channel_ids    bigint[];
    v_channel_names  text[];
    v_missing        bigint;
    v_ids            bigint[];
    v_row_channels   bigint[];
    v_inserted_ids   bigint[];
    v_wake_ids       bigint[];
    v_wake_ats       bigint[];
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

    -- One pass finds the first invalid row, if any; the batch is refused as a whole and the
    -- error names the row (items[i], counted from 0).
    SELECT u.* INTO v_bad
      FROM unnest(p_channels, p_payloads,
                  coalesce(p_run_at_ms, array_fill(NULL::bigint, ARRAY[v_n])),
                  coalesce(p_delay_ms, array_fill(NULL::bigint, ARRAY[v_n])),
                  coalesce(p_priorities, array_fill(NULL::integer, ARRAY[v_n])),
                  coalesce(p_dedup_keys, array_fill(NULL::text, ARRAY[v_n])),
                  coalesce(p_max_attempts, array_fill(NULL::integer, ARRAY[v_n])))
           WITH ORDINALITY AS u(channel, payload, run_at, delay, priority, dedup_key, max_attempts, ord)
     WHERE u.channel IS NULL OR char_length(u.channel) NOT BETWEEN 1 AND 200
        OR u.payload IS NULL
        OR coalesce(u.max_attempts, p_default_max_attempts) IS NULL
        OR coalesce(u.max_attempts, p_default_max_attempts) NOT BETWEEN 1 AND 1000
        OR (u.dedup_key IS NOT NULL AND char_length(u.dedup_key) NOT BETWEEN 1 AND 200)
        OR coalesce(u.priority, 0) NOT BETWEEN 0 AND 100
        OR u.delay < 0
        OR (u.run_at IS NOT NULL AND u.delay IS NOT NULL)
        OR (coalesce(u.priority, 0) > 0 AND coalesce(u.run_at, v_now + coalesce(u.delay, 0)) > v_now)
     ORDER BY u.ord
     LIMIT 1;
    IF FOUND THEN
        IF v_bad.channel IS NULL OR char_length(v_bad.channel) NOT BETWEEN 1 AND 200 THEN
            PERFORM lonnymq_raise_invalid_v1(format('items[%s].channel', v_bad.ord - 1),
                'must be 1 to 200 characters', quote_nullable(v_bad.channel));
        ELSIF v_bad.payload IS NULL THEN
            PERFORM lonnymq_raise_invalid_v1(format('items[%s].payload', v_bad.ord - 1), 'must not be null', NULL);
        ELSIF coalesce(v_bad.max_attempts, p_default_max_attempts) IS NULL
              OR coalesce(v_bad.max_attempts, p_default_max_attempts) NOT BETWEEN 1 AND 1000 THEN
            PERFORM lonnymq_raise_invalid_v1(format('items[%s].max_attempts', v_bad.ord - 1),
                'must be between 1 and 1000', coalesce(v_bad.max_attempts, p_default_max_attempts)::text);
        ELSIF v_bad.dedup_key IS NOT NULL AND char_length(v_bad.dedup_key) NOT BETWEEN 1 AND 200 THEN
            PERFORM lonnymq_raise_invalid_v1(format('items[%s].dedup_key', v_bad.ord - 1),
                'must be 1 to 200 characters', quote_literal(v_bad.dedup_key));
        ELSE
            -- Priority, delay or run time: the same checks and errors as a single enqueue.
            PERFORM lonnymq_dequeue_at_v1(v_now, v_bad.run_at, v_bad.delay, coalesce(v_bad.priority, 0),
                                          p_priority_step_ms);
        END IF;
    END IF;

    -- Missing channels in name order, then every channel's shared lock in id order ("an
    -- enqueue into this channel is in flight"). The lookup is a join: "name = ANY (array)"
    -- would, in the generic plan, test every channel of the queue against the whole batch.
    INSERT INTO lonnymq_channel (queue, name)
    SELECT DISTINCT p_queue, u.name FROM unnest(p_channels) AS u(name)
     WHERE NOT EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.queue = p_queue AND c.name = u.name)
     ORDER BY 2
    ON CONFLICT (queue, name) DO NOTHING;
    SELECT array_agg(c.id ORDER BY c.id) FILTER (WHERE c.id IS NOT NULL),
           array_agg(c.name ORDER BY c.id) FILTER (WHERE c.id IS NOT NULL),
           count(*) - count(c.id)
      INTO v_channel_ids, v_channel_names, v_missing
      FROM (SELECT DISTINCT u.name FROM unnest(p_channels) AS u(name)) u
      LEFT JOIN lonnymq_channel c ON c.queue = p_queue AND c.name = u.name;
    IF v_missing > 0 THEN
        RAISE EXCEPTION 'a channel of queue % was created concurrently; retry the transaction', p_queue
            USING ERRCODE = '40001';
    END IF;
    PERFORM pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(f.id))
       FROM unnest(v_channel_ids) AS f(id) ORDER BY f.id;

    -- One statement: stage the rows in memory with their ids drawn in input order (the sorted
    -- subquery), so a batch keeps FIFO within a channel; claim the dedup keys in (channel,
    -- key) order, the first row of a key in the batch winning; insert the messages whose key
    -- was claimed or that have none; report each channel's earliest new message for the wake.
    -- dequeue_at is lonnymq_dequeue_at_v1's rule, inlined (every row is valid by now).
    WITH rows AS MATERIALIZED (
        SELECT s.*, nextval('lonnymq_message_id_seq') AS new_id
          FROM (SELECT u.ord, f.id AS channel_id, u.payload,
                       coalesce(u.run_at, v_now + coalesce(u.delay, 0))
                           - coalesce(u.priority, 0)::bigint * p_priority_step_ms AS dequeue_at,
                       coalesce(u.priority, 0) AS priority, u.dedup_key,
                       coalesce(u.max_attempts, p_default_max_attempts) AS max_attempts
                  FROM unnest(p_channels, p_payloads,
                              coalesce(p_run_at_ms, array_fill(NULL::bigint, ARRAY[v_n])),
                              coalesce(p_delay_ms, array_fill(NULL::bigint, ARRAY[v_n])),
                              coalesce(p_priorities, array_fill(NULL::integer, ARRAY[v_n])),
                              coalesce(p_dedup_keys, array_fill(NULL::text, ARRAY[v_n])),
                              coalesce(p_max_attempts, array_fill(NULL::integer, ARRAY[v_n])))
                       WITH ORDINALITY AS u(channel, payload, run_at, delay, priority, dedup_key, max_attempts, ord)
                  JOIN unnest(v_channel_ids, v_channel_names) AS f(id, name) ON f.name = u.channel
                 ORDER BY u.ord) s
    ), claimed AS (
        INSERT INTO lonnymq_dedup (channel_id, dedup_key, message_id)
        SELECT DISTINCT ON (r.channel_id, r.dedup_key) r.channel_id, r.dedup_key, r.new_id
          FROM rows r
         WHERE r.dedup_key IS NOT NULL
         ORDER BY r.channel_id, r.dedup_key, r.ord
        ON CONFLICT (channel_id, dedup_key) DO NOTHING
        RETURNING message_id
    ), inserted AS (
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
        SELECT r.new_id, r.channel_id, r.payload, r.dequeue_at, r.priority, r.max_attempts, r.dedup_key
          FROM rows r
         WHERE r.dedup_key IS NULL OR r.new_id IN (SELECT c.message_id FROM claimed c)
        RETURNING id, channel_id, dequeue_at
    ), woken AS (
        SELECT i.channel_id, min(i.dequeue_at) AS at FROM inserted i GROUP BY i.channel_id
    )
    SELECT (SELECT array_agg(r.new_id ORDER BY r.ord) FROM rows r),
           (SELECT array_agg(r.channel_id ORDER BY r.ord) FROM rows r),
           (SELECT array_agg(i.id) FROM inserted i),
           (SELECT array_agg(w.channel_id ORDER BY w.channel_id) FROM woken w),
           (SELECT array_agg(w.at ORDER BY w.channel_id) FROM woken w)
      INTO v_ids, v_row_channels, v_inserted_ids, v_wake_ids, v_wake_ats;

    -- Rows whose key was already taken (earlier, by a concurrent batch, or by an earlier row
    -- of this one) get the existing id: one index probe each, in a new statement that sees
    -- the commits ON CONFLICT waited for.
    IF coalesce(cardinality(v_inserted_ids), 0) < v_n THEN
        SELECT array_agg(CASE WHEN i.id IS NOT NULL OR x.dedup_key IS NULL THEN x.id
                              ELSE coalesce((SELECT d.message_id FROM lonnymq_dedup d
                                              WHERE d.channel_id = x.channel_id
                                                AND d.dedup_key = x.dedup_key), x.id)
                         END ORDER BY x.ord)
          INTO v_ids
          FROM unnest(v_ids, v_row_channels, p_dedup_keys) WITH ORDINALITY AS x(id, channel_id, dedup_key, ord)
          LEFT JOIN unnest(v_inserted_ids) AS i(id) ON i.id = x.id;
    END IF;

    IF v_wake_ids IS NOT NULL THEN
        PERFORM lonnymq_mark_many_v1(p_queue, v_wake_ids, v_wake_ats, p_tolerance_ms);
    END IF;
    RETURN v_ids;
END
$$;

-- Delete an empty channel that no one holds (admin). Same contract as in 0003.
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
    -- Its wake-up marks too: dequeues apply marks through the channel row, so a deleted
    -- channel's marks would otherwise stay forever.
    DELETE FROM lonnymq_wake w WHERE w.channel_id = p_id;
    DELETE FROM lonnymq_channel c WHERE c.id = p_id;
    RETURN 'deleted';
END
$$;
