-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0036: no foreign key from lonnymq_message to lonnymq_channel, and no
-- lonnymq_message_channel_idx. The index (0028) was there only so the foreign key's check on
-- a channel's delete (a prune, delete_channel) was a probe; every message insert and every
-- lease (not a HOT update: the lease index changes) wrote an entry into it, about a tenth of
-- a plain dequeue+ack (docs/performance.md). The prune protocol already kept producers and
-- deletes apart; the foreign key's two jobs move into it:
-- - lonnymq_hold_channels_v1 (new): what the foreign key's check did on insert (lock the
--   channel row FOR KEY SHARE, fail with 23503 if it is gone), called once the producer holds
--   its channels' shared advisory locks, by every function that writes a new message:
--   lonnymq_enqueue_v1, lonnymq_enqueue_v2, lonnymq_enqueue_many_v1 (superseded, still
--   installed), lonnymq_enqueue_many_v2, lonnymq_enqueue_task_keyed_v1,
--   lonnymq_requeue_dead_v1, lonnymq_workflow_release_v1, lonnymq_workflow_release_v2 (same
--   names, arguments and results).
-- - lonnymq_prune_channels_v1, lonnymq_delete_channel_v1 (same names, arguments and results):
--   their emptiness tests read the ready and the lease index instead of the dropped one;
--   under an isolation level other than READ COMMITTED they raise LQ006 (their second look
--   needs a fresh snapshot; the foreign key used to catch that case).
-- - lonnymq_check_v2 (same contract): reports 'orphaned' messages, whose channel is missing.
-- - lonnymq_purge_channel_v1 (same contract): reads the channel's waiting messages along the
--   ready index (it had used the dropped index since 0028).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- A producer of new messages, once it holds its channels' shared advisory locks and before
-- it inserts: lock the channel rows FOR KEY SHARE (in id order) until it ends, and fail if one
-- is gone. p_ids are distinct channel ids. A prune or delete_channel (FOR UPDATE, then the
-- exclusive advisory lock, tried) passes a held row by, and a channel deleted after the
-- producer's lookup is found missing here: with a fresh snapshot under READ COMMITTED, since
-- the shared lock was granted only after the delete's exclusive one ended; under REPEATABLE
-- READ the row lock itself fails (40001). The error is SQLSTATE 23503 naming
-- lonnymq_message_channel_id_fkey, what the foreign key (dropped in 0036) raised: Python maps
-- it to ChannelGone. The foreign key's own check and lock, without the index of every
-- message by channel that its other side needed. The single enqueues (lonnymq_enqueue_v1,
-- lonnymq_enqueue_v2, lonnymq_enqueue_task_keyed_v1) write its lock out and call it only
-- when the row is missing, to raise the error.
CREATE FUNCTION lonnymq_hold_channels_v1(p_ids bigint[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_held integer;
BEGIN
    SELECT pg_catalog.count(*)::integer INTO v_held
      FROM (SELECT c.id FROM lonnymq_channel c WHERE c.id = ANY (p_ids) ORDER BY c.id FOR KEY SHARE OF c) h;
    IF v_held < coalesce(pg_catalog.cardinality(p_ids), 0) THEN
        RAISE EXCEPTION 'a channel was deleted (pruned as idle) after this enqueue looked it up; nothing was enqueued: retry the transaction'
            USING ERRCODE = '23503', CONSTRAINT = 'lonnymq_message_channel_id_fkey';
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION lonnymq_enqueue_v1(
    p_queue             text,
    p_channel           text,
    p_payload           jsonb,
    p_run_at_ms         bigint  DEFAULT NULL,
    p_delay_ms          bigint  DEFAULT NULL,
    p_priority          integer DEFAULT 0,
    p_dedup_key         text    DEFAULT NULL,
    p_max_attempts      integer DEFAULT 5,
    p_priority_step_ms  bigint  DEFAULT 1000,
    p_tolerance_ms      bigint  DEFAULT 50
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now        bigint := lonnymq_now_ms_v1();
    v_dequeue_at bigint;
    v_channel_id bigint;
    v_id         bigint;
BEGIN
    IF p_payload IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('payload', 'must not be null', NULL);
    ELSIF pg_catalog.jsonb_path_exists(p_payload, 'strict $.**{101}'::jsonpath) THEN
        PERFORM lonnymq_raise_too_deep_v1('payload'::text, p_payload);
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts NOT BETWEEN 1 AND 1000 THEN
        PERFORM lonnymq_raise_invalid_v1('max_attempts', 'must be between 1 and 1000', p_max_attempts::text);
    END IF;
    IF p_dedup_key IS NOT NULL AND pg_catalog.char_length(p_dedup_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM lonnymq_raise_invalid_v1('dedup_key', 'must be 1 to 200 characters', pg_catalog.quote_literal(p_dedup_key));
    END IF;
    IF p_tolerance_ms IS NULL OR p_tolerance_ms NOT BETWEEN 0 AND 86400000 THEN
        PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    END IF;
    v_dequeue_at := lonnymq_dequeue_at_v1(v_now, p_run_at_ms, p_delay_ms, p_priority, p_priority_step_ms);
    v_channel_id := lonnymq_channel_id_v1(p_queue, p_channel);

    -- "An enqueue into this channel is in flight": dequeuers will not park it meanwhile.
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(v_channel_id));
    -- No prune or delete_channel deletes its row until this transaction ends: the hold of
    -- lonnymq_hold_channels_v1, written out (a call per enqueue costs more than the lock).
    PERFORM 1 FROM lonnymq_channel c WHERE c.id = v_channel_id FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM lonnymq_hold_channels_v1(ARRAY[v_channel_id]);  -- gone: raises ChannelGone
    END IF;

    IF p_dedup_key IS NOT NULL THEN
        INSERT INTO lonnymq_dedup (channel_id, dedup_key, message_id)
        VALUES (v_channel_id, p_dedup_key, pg_catalog.nextval('lonnymq_message_id_seq'))
        ON CONFLICT (channel_id, dedup_key) DO NOTHING
        RETURNING message_id INTO v_id;
        IF v_id IS NULL THEN
            SELECT message_id INTO v_id FROM lonnymq_dedup
             WHERE channel_id = v_channel_id AND dedup_key = p_dedup_key;
            IF v_id IS NULL THEN
                RAISE EXCEPTION 'dedup key % was taken concurrently; retry the transaction', p_dedup_key
                    USING ERRCODE = '40001';
            END IF;
            RETURN v_id;
        END IF;
    ELSE
        v_id := pg_catalog.nextval('lonnymq_message_id_seq');
    END IF;

    INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
    VALUES (v_id, v_channel_id, p_payload, v_dequeue_at, p_priority, p_max_attempts, p_dedup_key);

    PERFORM lonnymq_mark_v1(p_queue, v_channel_id, v_dequeue_at, p_tolerance_ms);
    RETURN v_id;
END
$$;
-- One message with a dedup mode (docs/flow-control.md): lonnymq_enqueue_v1 plus
-- p_on_duplicate, 'skip' (the key's first message stands: v1's behaviour), 'replace'
-- (debounce) or 'update' (throttle); see lonnymq_enqueue_keyed_v1. A mode other than 'skip'
-- needs a dedup key. Returns the id of the message the enqueue created or changed.
CREATE OR REPLACE FUNCTION lonnymq_enqueue_v2(
    p_queue             text,
    p_channel           text,
    p_payload           jsonb,
    p_run_at_ms         bigint  DEFAULT NULL,
    p_delay_ms          bigint  DEFAULT NULL,
    p_priority          integer DEFAULT 0,
    p_dedup_key         text    DEFAULT NULL,
    p_on_duplicate      text    DEFAULT 'skip',
    p_max_attempts      integer DEFAULT 5,
    p_priority_step_ms  bigint  DEFAULT 1000,
    p_tolerance_ms      bigint  DEFAULT 50
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now        bigint := lonnymq_now_ms_v1();
    v_dequeue_at bigint;
    v_channel_id bigint;
    v_id         bigint;
    v_wake_at    bigint;
BEGIN
    IF p_payload IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('payload', 'must not be null', NULL);
    ELSIF pg_catalog.jsonb_path_exists(p_payload, 'strict $.**{101}'::jsonpath) THEN
        PERFORM lonnymq_raise_too_deep_v1('payload'::text, p_payload);
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts NOT BETWEEN 1 AND 1000 THEN
        PERFORM lonnymq_raise_invalid_v1('max_attempts', 'must be between 1 and 1000', p_max_attempts::text);
    END IF;
    IF p_dedup_key IS NOT NULL AND pg_catalog.char_length(p_dedup_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM lonnymq_raise_invalid_v1('dedup_key', 'must be 1 to 200 characters', pg_catalog.quote_literal(p_dedup_key));
    END IF;
    IF p_on_duplicate IS NULL OR p_on_duplicate NOT IN ('skip', 'replace', 'update') THEN
        PERFORM lonnymq_raise_invalid_v1('on_duplicate', 'must be skip, replace or update',
                                         pg_catalog.quote_nullable(p_on_duplicate));
    ELSIF p_on_duplicate <> 'skip' AND p_dedup_key IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('on_duplicate', 'needs a dedup_key', pg_catalog.quote_literal(p_on_duplicate));
    END IF;
    IF p_tolerance_ms IS NULL OR p_tolerance_ms NOT BETWEEN 0 AND 86400000 THEN
        PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    END IF;
    v_dequeue_at := lonnymq_dequeue_at_v1(v_now, p_run_at_ms, p_delay_ms, p_priority, p_priority_step_ms);
    v_channel_id := lonnymq_channel_id_v1(p_queue, p_channel);

    -- "An enqueue into this channel is in flight": dequeuers will not park it meanwhile.
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(v_channel_id));
    -- No prune or delete_channel deletes its row until this transaction ends: the hold of
    -- lonnymq_hold_channels_v1, written out (a call per enqueue costs more than the lock).
    PERFORM 1 FROM lonnymq_channel c WHERE c.id = v_channel_id FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM lonnymq_hold_channels_v1(ARRAY[v_channel_id]);  -- gone: raises ChannelGone
    END IF;

    IF p_dedup_key IS NULL THEN
        v_id := pg_catalog.nextval('lonnymq_message_id_seq');
    ELSIF p_on_duplicate = 'skip' THEN
        INSERT INTO lonnymq_dedup (channel_id, dedup_key, message_id)
        VALUES (v_channel_id, p_dedup_key, pg_catalog.nextval('lonnymq_message_id_seq'))
        ON CONFLICT (channel_id, dedup_key) DO NOTHING
        RETURNING message_id INTO v_id;
        IF v_id IS NULL THEN
            SELECT message_id INTO v_id FROM lonnymq_dedup
             WHERE channel_id = v_channel_id AND dedup_key = p_dedup_key;
            IF v_id IS NULL THEN
                RAISE EXCEPTION 'dedup key % was taken concurrently; retry the transaction', p_dedup_key
                    USING ERRCODE = '40001';
            END IF;
            RETURN v_id;
        END IF;
    ELSE
        SELECT k.id, k.wake_at INTO v_id, v_wake_at
          FROM lonnymq_enqueue_keyed_v1(v_channel_id, p_dedup_key, p_on_duplicate,
                                        pg_catalog.nextval('lonnymq_message_id_seq'), p_payload,
                                        v_dequeue_at, p_priority, p_max_attempts) k;
        IF v_wake_at IS NOT NULL THEN
            PERFORM lonnymq_mark_v1(p_queue, v_channel_id, v_wake_at, p_tolerance_ms);
        END IF;
        RETURN v_id;
    END IF;

    INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
    VALUES (v_id, v_channel_id, p_payload, v_dequeue_at, p_priority, p_max_attempts, p_dedup_key);

    PERFORM lonnymq_mark_v1(p_queue, v_channel_id, v_dequeue_at, p_tolerance_ms);
    RETURN v_id;
END
$$;
-- Superseded by lonnymq_enqueue_many_v2 (migration 0025_dedup_modes).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- lonnymq_publish_v1 calls it.
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
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now            bigint := lonnymq_now_ms_v1();
    v_n              integer := coalesce(pg_catalog.cardinality(p_payloads), 0);
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
    IF coalesce(pg_catalog.cardinality(p_channels), 0) <> v_n
       OR (p_run_at_ms IS NOT NULL AND pg_catalog.cardinality(p_run_at_ms) <> v_n)
       OR (p_delay_ms IS NOT NULL AND pg_catalog.cardinality(p_delay_ms) <> v_n)
       OR (p_priorities IS NOT NULL AND pg_catalog.cardinality(p_priorities) <> v_n)
       OR (p_dedup_keys IS NOT NULL AND pg_catalog.cardinality(p_dedup_keys) <> v_n)
       OR (p_max_attempts IS NOT NULL AND pg_catalog.cardinality(p_max_attempts) <> v_n) THEN
        PERFORM lonnymq_raise_invalid_v1('items', 'arrays must all have the same length', v_n::text);
    END IF;
    PERFORM lonnymq_check_list_v1('channels', pg_catalog.array_ndims(p_channels));
    PERFORM lonnymq_check_list_v1('payloads', pg_catalog.array_ndims(p_payloads));
    PERFORM lonnymq_check_list_v1('run_at', pg_catalog.array_ndims(p_run_at_ms));
    PERFORM lonnymq_check_list_v1('delay', pg_catalog.array_ndims(p_delay_ms));
    PERFORM lonnymq_check_list_v1('priorities', pg_catalog.array_ndims(p_priorities));
    PERFORM lonnymq_check_list_v1('dedup_keys', pg_catalog.array_ndims(p_dedup_keys));
    PERFORM lonnymq_check_list_v1('max_attempts', pg_catalog.array_ndims(p_max_attempts));
    IF v_n = 0 THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    PERFORM lonnymq_check_names_v1(p_queue, 'x'::text);
    PERFORM lonnymq_check_range_v1('priority_step', p_priority_step_ms, 0::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);

    -- One pass finds the first invalid row, if any; the batch is refused as a whole and the
    -- error names the row (items[i], counted from 0).
    SELECT u.* INTO v_bad
      FROM ROWS FROM (pg_catalog.unnest(p_channels),
                      pg_catalog.unnest(p_payloads),
                      pg_catalog.unnest(coalesce(p_run_at_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_delay_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_priorities, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_dedup_keys, pg_catalog.array_fill(NULL::text, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_max_attempts, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))))
           WITH ORDINALITY AS u(channel, payload, run_at, delay, priority, dedup_key, max_attempts, ord)
     WHERE u.channel IS NULL OR pg_catalog.char_length(u.channel) NOT BETWEEN 1 AND 200 OR u.channel !~ '\S'
        OR u.payload IS NULL
        OR pg_catalog.jsonb_path_exists(u.payload, 'strict $.**{101}'::jsonpath)
        OR coalesce(u.max_attempts, p_default_max_attempts) IS NULL
        OR coalesce(u.max_attempts, p_default_max_attempts) NOT BETWEEN 1 AND 1000
        OR (u.dedup_key IS NOT NULL AND pg_catalog.char_length(u.dedup_key) NOT BETWEEN 1 AND 200)
        OR coalesce(u.priority, 0) NOT BETWEEN 0 AND 100
        OR u.delay NOT BETWEEN 0 AND 3155760000000
        OR u.run_at NOT BETWEEN 0 AND v_now + 3155760000000
        OR (u.run_at IS NOT NULL AND u.delay IS NOT NULL)
        OR (coalesce(u.priority, 0) > 0 AND coalesce(u.run_at, v_now + coalesce(u.delay, 0)) > v_now)
     ORDER BY u.ord
     LIMIT 1;
    IF FOUND THEN
        IF v_bad.channel IS NULL OR pg_catalog.char_length(v_bad.channel) NOT BETWEEN 1 AND 200
           OR v_bad.channel !~ '\S' THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].channel', v_bad.ord - 1),
                'must be 1 to 200 characters, not only blanks', pg_catalog.quote_nullable(v_bad.channel));
        ELSIF v_bad.payload IS NULL THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].payload', v_bad.ord - 1), 'must not be null', NULL);
        ELSIF pg_catalog.jsonb_path_exists(v_bad.payload, 'strict $.**{101}'::jsonpath) THEN
            PERFORM lonnymq_raise_too_deep_v1(pg_catalog.format('items[%s].payload', v_bad.ord - 1), v_bad.payload);
        ELSIF coalesce(v_bad.max_attempts, p_default_max_attempts) IS NULL
              OR coalesce(v_bad.max_attempts, p_default_max_attempts) NOT BETWEEN 1 AND 1000 THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].max_attempts', v_bad.ord - 1),
                'must be between 1 and 1000', coalesce(v_bad.max_attempts, p_default_max_attempts)::text);
        ELSIF v_bad.dedup_key IS NOT NULL AND pg_catalog.char_length(v_bad.dedup_key) NOT BETWEEN 1 AND 200 THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].dedup_key', v_bad.ord - 1),
                'must be 1 to 200 characters', pg_catalog.quote_literal(v_bad.dedup_key));
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
    SELECT DISTINCT p_queue, u.name FROM pg_catalog.unnest(p_channels) AS u(name)
     WHERE NOT EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.queue = p_queue AND c.name = u.name)
     ORDER BY 2
    ON CONFLICT (queue, name) DO NOTHING;
    SELECT pg_catalog.array_agg(c.id ORDER BY c.id) FILTER (WHERE c.id IS NOT NULL),
           pg_catalog.array_agg(c.name ORDER BY c.id) FILTER (WHERE c.id IS NOT NULL),
           pg_catalog.count(*) - pg_catalog.count(c.id)
      INTO v_channel_ids, v_channel_names, v_missing
      FROM (SELECT DISTINCT u.name FROM pg_catalog.unnest(p_channels) AS u(name)) u
      LEFT JOIN lonnymq_channel c ON c.queue = p_queue AND c.name = u.name;
    IF v_missing > 0 THEN
        RAISE EXCEPTION 'a channel of queue % was created concurrently; retry the transaction', p_queue
            USING ERRCODE = '40001';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(f.id))
       FROM pg_catalog.unnest(v_channel_ids) AS f(id) ORDER BY f.id;
    -- No prune or delete_channel deletes them until this transaction ends (0036).
    PERFORM lonnymq_hold_channels_v1(v_channel_ids);

    -- One statement: stage the rows in memory with their ids drawn in input order (the sorted
    -- subquery), so a batch keeps FIFO within a channel; claim the dedup keys in (channel,
    -- key) order, the first row of a key in the batch winning; insert the messages whose key
    -- was claimed or that have none; report each channel's earliest new message for the wake.
    -- dequeue_at is lonnymq_dequeue_at_v1's rule, inlined (every row is valid by now).
    WITH rows AS MATERIALIZED (
        SELECT s.*, pg_catalog.nextval('lonnymq_message_id_seq') AS new_id
          FROM (SELECT u.ord, f.id AS channel_id, u.payload,
                       coalesce(u.run_at, v_now + coalesce(u.delay, 0))
                           - coalesce(u.priority, 0)::bigint * p_priority_step_ms AS dequeue_at,
                       coalesce(u.priority, 0) AS priority, u.dedup_key,
                       coalesce(u.max_attempts, p_default_max_attempts) AS max_attempts
                  FROM ROWS FROM (pg_catalog.unnest(p_channels),
                                  pg_catalog.unnest(p_payloads),
                                  pg_catalog.unnest(coalesce(p_run_at_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_delay_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_priorities, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_dedup_keys, pg_catalog.array_fill(NULL::text, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_max_attempts, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))))
                       WITH ORDINALITY AS u(channel, payload, run_at, delay, priority, dedup_key, max_attempts, ord)
                  JOIN ROWS FROM (pg_catalog.unnest(v_channel_ids), pg_catalog.unnest(v_channel_names)) AS f(id, name) ON f.name = u.channel
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
        SELECT i.channel_id, pg_catalog.min(i.dequeue_at) AS at FROM inserted i GROUP BY i.channel_id
    )
    SELECT (SELECT pg_catalog.array_agg(r.new_id ORDER BY r.ord) FROM rows r),
           (SELECT pg_catalog.array_agg(r.channel_id ORDER BY r.ord) FROM rows r),
           (SELECT pg_catalog.array_agg(i.id) FROM inserted i),
           (SELECT pg_catalog.array_agg(w.channel_id ORDER BY w.channel_id) FROM woken w),
           (SELECT pg_catalog.array_agg(w.at ORDER BY w.channel_id) FROM woken w)
      INTO v_ids, v_row_channels, v_inserted_ids, v_wake_ids, v_wake_ats;

    -- Rows whose key was already taken (earlier, by a concurrent batch, or by an earlier row
    -- of this one) get the existing id: one index probe each, in a new statement that sees
    -- the commits ON CONFLICT waited for. A key whose row vanished meanwhile (its holder
    -- rolled back, or it was cancelled or pruned) has no id to give: like a single enqueue,
    -- the batch fails with a serialization error, for the caller to retry.
    IF coalesce(pg_catalog.cardinality(v_inserted_ids), 0) < v_n THEN
        SELECT pg_catalog.array_agg(CASE WHEN i.id IS NOT NULL OR x.dedup_key IS NULL THEN x.id
                              ELSE (SELECT d.message_id FROM lonnymq_dedup d
                                     WHERE d.channel_id = x.channel_id AND d.dedup_key = x.dedup_key)
                         END ORDER BY x.ord)
          INTO v_ids
          FROM ROWS FROM (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_row_channels), pg_catalog.unnest(p_dedup_keys)) WITH ORDINALITY AS x(id, channel_id, dedup_key, ord)
          LEFT JOIN pg_catalog.unnest(v_inserted_ids) AS i(id) ON i.id = x.id;
        IF pg_catalog.array_position(v_ids, NULL::bigint) IS NOT NULL THEN
            RAISE EXCEPTION 'dedup key % was taken concurrently; retry the transaction',
                p_dedup_keys[pg_catalog.array_position(v_ids, NULL::bigint)]
                USING ERRCODE = '40001';
        END IF;
    END IF;

    IF v_wake_ids IS NOT NULL THEN
        PERFORM lonnymq_mark_many_v1(p_queue, v_wake_ids, v_wake_ats, p_tolerance_ms);
    END IF;
    RETURN v_ids;
END
$$;
-- Many messages of one queue, any channels, in one call. Returns the ids in input order (the
-- existing id where a dedup key repeats, also within the batch). NULL arrays mean "defaults
-- for every row". Channels are created in name order and locked in id order, and dedup keys
-- are claimed in (channel, key) order, so concurrent batches never deadlock, whatever their
-- row order. p_on_duplicate is each row's dedup mode ('skip', 'replace' or 'update'; a NULL
-- array or element: 'skip'). A batch whose rows all skip runs as one set-based statement
-- (lonnymq_enqueue_many_v1's, unchanged). A batch with a 'replace' or 'update' row
-- inserts its keyless rows in that statement and applies its keyed rows through
-- lonnymq_enqueue_keyed_v1 one at a time, in (channel, key, input) order, each with the id
-- drawn for it in input order: the rows of one key behave as that many enqueues in input
-- order would, and every row gets the id of the message its enqueue created or changed.
CREATE OR REPLACE FUNCTION lonnymq_enqueue_many_v2(
    p_queue            text,
    p_channels         text[],
    p_payloads         jsonb[],
    p_run_at_ms        bigint[]  DEFAULT NULL,
    p_delay_ms         bigint[]  DEFAULT NULL,
    p_priorities       integer[] DEFAULT NULL,
    p_dedup_keys       text[]    DEFAULT NULL,
    p_on_duplicate     text[]    DEFAULT NULL,
    p_max_attempts     integer[] DEFAULT NULL,
    p_default_max_attempts integer DEFAULT 5,
    p_priority_step_ms bigint    DEFAULT 1000,
    p_tolerance_ms     bigint    DEFAULT 50
) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now            bigint := lonnymq_now_ms_v1();
    v_n              integer := coalesce(pg_catalog.cardinality(p_payloads), 0);
    v_bad            record;
    v_channel_ids    bigint[];
    v_channel_names  text[];
    v_missing        bigint;
    v_ids            bigint[];
    v_row_channels   bigint[];
    v_inserted_ids   bigint[];
    v_wake_ids       bigint[];
    v_wake_ats       bigint[];
    v_keyed          boolean;
    v_got            record;
    v_k_ords         bigint[];
    v_k_channels     bigint[];
    v_k_keys         text[];
    v_k_modes        text[];
    v_k_new_ids      bigint[];
    v_k_payloads     jsonb[];
    v_k_ats          bigint[];
    v_k_priorities   integer[];
    v_k_attempts     integer[];
    v_k_wake_ids     bigint[] := ARRAY[]::bigint[];
    v_k_wake_ats     bigint[] := ARRAY[]::bigint[];
BEGIN
    IF coalesce(pg_catalog.cardinality(p_channels), 0) <> v_n
       OR (p_run_at_ms IS NOT NULL AND pg_catalog.cardinality(p_run_at_ms) <> v_n)
       OR (p_delay_ms IS NOT NULL AND pg_catalog.cardinality(p_delay_ms) <> v_n)
       OR (p_priorities IS NOT NULL AND pg_catalog.cardinality(p_priorities) <> v_n)
       OR (p_dedup_keys IS NOT NULL AND pg_catalog.cardinality(p_dedup_keys) <> v_n)
       OR (p_on_duplicate IS NOT NULL AND pg_catalog.cardinality(p_on_duplicate) <> v_n)
       OR (p_max_attempts IS NOT NULL AND pg_catalog.cardinality(p_max_attempts) <> v_n) THEN
        PERFORM lonnymq_raise_invalid_v1('items', 'arrays must all have the same length', v_n::text);
    END IF;
    PERFORM lonnymq_check_list_v1('channels', pg_catalog.array_ndims(p_channels));
    PERFORM lonnymq_check_list_v1('payloads', pg_catalog.array_ndims(p_payloads));
    PERFORM lonnymq_check_list_v1('run_at', pg_catalog.array_ndims(p_run_at_ms));
    PERFORM lonnymq_check_list_v1('delay', pg_catalog.array_ndims(p_delay_ms));
    PERFORM lonnymq_check_list_v1('priorities', pg_catalog.array_ndims(p_priorities));
    PERFORM lonnymq_check_list_v1('dedup_keys', pg_catalog.array_ndims(p_dedup_keys));
    PERFORM lonnymq_check_list_v1('on_duplicate', pg_catalog.array_ndims(p_on_duplicate));
    PERFORM lonnymq_check_list_v1('max_attempts', pg_catalog.array_ndims(p_max_attempts));
    IF v_n = 0 THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    PERFORM lonnymq_check_names_v1(p_queue, 'x'::text);
    PERFORM lonnymq_check_range_v1('priority_step', p_priority_step_ms, 0::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);

    -- One pass finds the first invalid row, if any; the batch is refused as a whole and the
    -- error names the row (items[i], counted from 0).
    SELECT u.* INTO v_bad
      FROM ROWS FROM (pg_catalog.unnest(p_channels),
                      pg_catalog.unnest(p_payloads),
                      pg_catalog.unnest(coalesce(p_run_at_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_delay_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_priorities, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_dedup_keys, pg_catalog.array_fill(NULL::text, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_max_attempts, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_on_duplicate, pg_catalog.array_fill(NULL::text, ARRAY[v_n]))))
           WITH ORDINALITY AS u(channel, payload, run_at, delay, priority, dedup_key, max_attempts, on_duplicate, ord)
     WHERE u.channel IS NULL OR pg_catalog.char_length(u.channel) NOT BETWEEN 1 AND 200 OR u.channel !~ '\S'
        OR u.payload IS NULL
        OR pg_catalog.jsonb_path_exists(u.payload, 'strict $.**{101}'::jsonpath)
        OR coalesce(u.max_attempts, p_default_max_attempts) IS NULL
        OR coalesce(u.max_attempts, p_default_max_attempts) NOT BETWEEN 1 AND 1000
        OR (u.dedup_key IS NOT NULL AND pg_catalog.char_length(u.dedup_key) NOT BETWEEN 1 AND 200)
        OR coalesce(u.on_duplicate, 'skip') NOT IN ('skip', 'replace', 'update')
        OR (coalesce(u.on_duplicate, 'skip') <> 'skip' AND u.dedup_key IS NULL)
        OR coalesce(u.priority, 0) NOT BETWEEN 0 AND 100
        OR u.delay NOT BETWEEN 0 AND 3155760000000
        OR u.run_at NOT BETWEEN 0 AND v_now + 3155760000000
        OR (u.run_at IS NOT NULL AND u.delay IS NOT NULL)
        OR (coalesce(u.priority, 0) > 0 AND coalesce(u.run_at, v_now + coalesce(u.delay, 0)) > v_now)
     ORDER BY u.ord
     LIMIT 1;
    IF FOUND THEN
        IF v_bad.channel IS NULL OR pg_catalog.char_length(v_bad.channel) NOT BETWEEN 1 AND 200
           OR v_bad.channel !~ '\S' THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].channel', v_bad.ord - 1),
                'must be 1 to 200 characters, not only blanks', pg_catalog.quote_nullable(v_bad.channel));
        ELSIF v_bad.payload IS NULL THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].payload', v_bad.ord - 1), 'must not be null', NULL);
        ELSIF pg_catalog.jsonb_path_exists(v_bad.payload, 'strict $.**{101}'::jsonpath) THEN
            PERFORM lonnymq_raise_too_deep_v1(pg_catalog.format('items[%s].payload', v_bad.ord - 1), v_bad.payload);
        ELSIF coalesce(v_bad.max_attempts, p_default_max_attempts) IS NULL
              OR coalesce(v_bad.max_attempts, p_default_max_attempts) NOT BETWEEN 1 AND 1000 THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].max_attempts', v_bad.ord - 1),
                'must be between 1 and 1000', coalesce(v_bad.max_attempts, p_default_max_attempts)::text);
        ELSIF v_bad.dedup_key IS NOT NULL AND pg_catalog.char_length(v_bad.dedup_key) NOT BETWEEN 1 AND 200 THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].dedup_key', v_bad.ord - 1),
                'must be 1 to 200 characters', pg_catalog.quote_literal(v_bad.dedup_key));
        ELSIF coalesce(v_bad.on_duplicate, 'skip') NOT IN ('skip', 'replace', 'update') THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].on_duplicate', v_bad.ord - 1),
                'must be skip, replace or update', pg_catalog.quote_literal(v_bad.on_duplicate));
        ELSIF coalesce(v_bad.on_duplicate, 'skip') <> 'skip' AND v_bad.dedup_key IS NULL THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].on_duplicate', v_bad.ord - 1),
                'needs a dedup_key', pg_catalog.quote_literal(v_bad.on_duplicate));
        ELSE
            -- Priority, delay or run time: the same checks and errors as a single enqueue.
            PERFORM lonnymq_dequeue_at_v1(v_now, v_bad.run_at, v_bad.delay, coalesce(v_bad.priority, 0),
                                          p_priority_step_ms);
        END IF;
    END IF;

    -- A batch with a 'replace' or 'update' row takes its keyed rows one by one (below);
    -- otherwise every row goes through the one set-based statement.
    v_keyed := p_on_duplicate IS NOT NULL AND p_dedup_keys IS NOT NULL
               AND EXISTS (SELECT 1 FROM pg_catalog.unnest(p_on_duplicate) AS o(mode) WHERE o.mode <> 'skip');

    -- Missing channels in name order, then every channel's shared lock in id order ("an
    -- enqueue into this channel is in flight"). The lookup is a join: "name = ANY (array)"
    -- would, in the generic plan, test every channel of the queue against the whole batch.
    INSERT INTO lonnymq_channel (queue, name)
    SELECT DISTINCT p_queue, u.name FROM pg_catalog.unnest(p_channels) AS u(name)
     WHERE NOT EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.queue = p_queue AND c.name = u.name)
     ORDER BY 2
    ON CONFLICT (queue, name) DO NOTHING;
    SELECT pg_catalog.array_agg(c.id ORDER BY c.id) FILTER (WHERE c.id IS NOT NULL),
           pg_catalog.array_agg(c.name ORDER BY c.id) FILTER (WHERE c.id IS NOT NULL),
           pg_catalog.count(*) - pg_catalog.count(c.id)
      INTO v_channel_ids, v_channel_names, v_missing
      FROM (SELECT DISTINCT u.name FROM pg_catalog.unnest(p_channels) AS u(name)) u
      LEFT JOIN lonnymq_channel c ON c.queue = p_queue AND c.name = u.name;
    IF v_missing > 0 THEN
        RAISE EXCEPTION 'a channel of queue % was created concurrently; retry the transaction', p_queue
            USING ERRCODE = '40001';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(f.id))
       FROM pg_catalog.unnest(v_channel_ids) AS f(id) ORDER BY f.id;
    PERFORM lonnymq_hold_channels_v1(v_channel_ids);

    -- One statement: stage the rows in memory with their ids drawn in input order (the sorted
    -- subquery), so a batch keeps FIFO within a channel; claim the dedup keys in (channel,
    -- key) order, the first row of a key in the batch winning; insert the messages whose key
    -- was claimed or that have none; report each channel's earliest new message for the wake.
    -- dequeue_at is lonnymq_dequeue_at_v1's rule, inlined (every row is valid by now).
    WITH rows AS MATERIALIZED (
        SELECT s.*, pg_catalog.nextval('lonnymq_message_id_seq') AS new_id
          FROM (SELECT u.ord, f.id AS channel_id, u.payload,
                       coalesce(u.run_at, v_now + coalesce(u.delay, 0))
                           - coalesce(u.priority, 0)::bigint * p_priority_step_ms AS dequeue_at,
                       coalesce(u.priority, 0) AS priority, u.dedup_key,
                       coalesce(u.max_attempts, p_default_max_attempts) AS max_attempts,
                       coalesce(u.on_duplicate, 'skip') AS on_duplicate
                  FROM ROWS FROM (pg_catalog.unnest(p_channels),
                                  pg_catalog.unnest(p_payloads),
                                  pg_catalog.unnest(coalesce(p_run_at_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_delay_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_priorities, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_dedup_keys, pg_catalog.array_fill(NULL::text, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_max_attempts, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_on_duplicate, pg_catalog.array_fill(NULL::text, ARRAY[v_n]))))
                       WITH ORDINALITY AS u(channel, payload, run_at, delay, priority, dedup_key, max_attempts, on_duplicate, ord)
                  JOIN ROWS FROM (pg_catalog.unnest(v_channel_ids), pg_catalog.unnest(v_channel_names)) AS f(id, name) ON f.name = u.channel
                 ORDER BY u.ord) s
    ), claimed AS (
        INSERT INTO lonnymq_dedup (channel_id, dedup_key, message_id)
        SELECT DISTINCT ON (r.channel_id, r.dedup_key) r.channel_id, r.dedup_key, r.new_id
          FROM rows r
         WHERE r.dedup_key IS NOT NULL AND NOT v_keyed
         ORDER BY r.channel_id, r.dedup_key, r.ord
        ON CONFLICT (channel_id, dedup_key) DO NOTHING
        RETURNING message_id
    ), inserted AS (
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
        SELECT r.new_id, r.channel_id, r.payload, r.dequeue_at, r.priority, r.max_attempts, r.dedup_key
          FROM rows r
         WHERE r.dedup_key IS NULL OR (NOT v_keyed AND r.new_id IN (SELECT c.message_id FROM claimed c))
        RETURNING id, channel_id, dequeue_at
    ), keyed AS MATERIALIZED (
        -- A batch with modes: its keyed rows, left to the loop below.
        SELECT r.* FROM rows r WHERE v_keyed AND r.dedup_key IS NOT NULL
    ), woken AS (
        SELECT i.channel_id, pg_catalog.min(i.dequeue_at) AS at FROM inserted i GROUP BY i.channel_id
    )
    SELECT (SELECT pg_catalog.array_agg(r.new_id ORDER BY r.ord) FROM rows r),
           (SELECT pg_catalog.array_agg(r.channel_id ORDER BY r.ord) FROM rows r),
           (SELECT pg_catalog.array_agg(i.id) FROM inserted i),
           (SELECT pg_catalog.array_agg(w.channel_id ORDER BY w.channel_id) FROM woken w),
           (SELECT pg_catalog.array_agg(w.at ORDER BY w.channel_id) FROM woken w),
           k.ords, k.channels, k.keys, k.modes, k.new_ids, k.payloads, k.ats, k.priorities, k.attempts
      INTO v_ids, v_row_channels, v_inserted_ids, v_wake_ids, v_wake_ats,
           v_k_ords, v_k_channels, v_k_keys, v_k_modes, v_k_new_ids, v_k_payloads, v_k_ats, v_k_priorities,
           v_k_attempts
      FROM (SELECT pg_catalog.array_agg(k.ord ORDER BY k.channel_id, k.dedup_key, k.ord) AS ords,
                   pg_catalog.array_agg(k.channel_id ORDER BY k.channel_id, k.dedup_key, k.ord) AS channels,
                   pg_catalog.array_agg(k.dedup_key ORDER BY k.channel_id, k.dedup_key, k.ord) AS keys,
                   pg_catalog.array_agg(k.on_duplicate ORDER BY k.channel_id, k.dedup_key, k.ord) AS modes,
                   pg_catalog.array_agg(k.new_id ORDER BY k.channel_id, k.dedup_key, k.ord) AS new_ids,
                   pg_catalog.array_agg(k.payload ORDER BY k.channel_id, k.dedup_key, k.ord) AS payloads,
                   pg_catalog.array_agg(k.dequeue_at ORDER BY k.channel_id, k.dedup_key, k.ord) AS ats,
                   pg_catalog.array_agg(k.priority ORDER BY k.channel_id, k.dedup_key, k.ord) AS priorities,
                   pg_catalog.array_agg(k.max_attempts ORDER BY k.channel_id, k.dedup_key, k.ord) AS attempts
              FROM keyed k) k;

    -- A batch with modes: its keyed rows one at a time, in (channel, key, input) order, so
    -- the rows of one key apply in input order (as that many enqueues would) and concurrent
    -- batches take the keys' locks in one order. Each keeps the id drawn for it above.
    IF v_k_ords IS NOT NULL THEN
        FOR i IN 1 .. pg_catalog.cardinality(v_k_ords) LOOP
            SELECT k.id, k.wake_at INTO v_got
              FROM lonnymq_enqueue_keyed_v1(v_k_channels[i], v_k_keys[i], v_k_modes[i], v_k_new_ids[i],
                                            v_k_payloads[i], v_k_ats[i], v_k_priorities[i], v_k_attempts[i]) k;
            v_ids[v_k_ords[i]::integer] := v_got.id;
            IF v_got.wake_at IS NOT NULL THEN
                v_k_wake_ids := pg_catalog.array_append(v_k_wake_ids, v_k_channels[i]);
                v_k_wake_ats := pg_catalog.array_append(v_k_wake_ats, v_got.wake_at);
            END IF;
        END LOOP;
        SELECT pg_catalog.array_agg(w.id ORDER BY w.id), pg_catalog.array_agg(w.at ORDER BY w.id)
          INTO v_wake_ids, v_wake_ats
          FROM (SELECT u.id, pg_catalog.min(u.at) AS at
                  FROM (SELECT * FROM ROWS FROM (pg_catalog.unnest(v_wake_ids), pg_catalog.unnest(v_wake_ats)) AS a(id, at)
                        UNION ALL
                        SELECT * FROM ROWS FROM (pg_catalog.unnest(v_k_wake_ids), pg_catalog.unnest(v_k_wake_ats)) AS b(id, at)) u
                 WHERE u.id IS NOT NULL
                 GROUP BY u.id) w;
    END IF;

    -- Rows whose key was already taken (earlier, by a concurrent batch, or by an earlier row
    -- of this one) get the existing id: one index probe each, in a new statement that sees
    -- the commits ON CONFLICT waited for. A key whose row vanished meanwhile (its holder
    -- rolled back, or it was cancelled or pruned) has no id to give: like a single enqueue,
    -- the batch fails with a serialization error, for the caller to retry.
    IF NOT v_keyed AND coalesce(pg_catalog.cardinality(v_inserted_ids), 0) < v_n THEN
        SELECT pg_catalog.array_agg(CASE WHEN i.id IS NOT NULL OR x.dedup_key IS NULL THEN x.id
                              ELSE (SELECT d.message_id FROM lonnymq_dedup d
                                     WHERE d.channel_id = x.channel_id AND d.dedup_key = x.dedup_key)
                         END ORDER BY x.ord)
          INTO v_ids
          FROM ROWS FROM (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_row_channels), pg_catalog.unnest(p_dedup_keys)) WITH ORDINALITY AS x(id, channel_id, dedup_key, ord)
          LEFT JOIN pg_catalog.unnest(v_inserted_ids) AS i(id) ON i.id = x.id;
        IF pg_catalog.array_position(v_ids, NULL::bigint) IS NOT NULL THEN
            RAISE EXCEPTION 'dedup key % was taken concurrently; retry the transaction',
                p_dedup_keys[pg_catalog.array_position(v_ids, NULL::bigint)]
                USING ERRCODE = '40001';
        END IF;
    END IF;

    IF v_wake_ids IS NOT NULL THEN
        PERFORM lonnymq_mark_many_v1(p_queue, v_wake_ids, v_wake_ats, p_tolerance_ms);
    END IF;
    RETURN v_ids;
END
$$;
-- A Django Task with a dedup key (django_lonnymq.tasks.dedup; docs/tasks.md): the rule of
-- lonnymq_enqueue_keyed_v1 for the key's message, and one result row per message. The
-- key's row is locked first (FOR UPDATE, in 'replace' and 'update'), so the result read
-- beside it is that of the message the key names until this transaction ends:
-- - a new message (no key yet, or the key's message is running or finished in 'replace'
--   and 'update'): its own new result row, READY; outcome 'created';
-- - 'skip' of a key that has a message: nothing is written, the key's message's result row
--   is returned (whatever its status); outcome 'skipped'. A key whose message has no result
--   row (not a task message, or its result was pruned) is refused;
-- - 'replace' / 'update' of a waiting message: the message takes this payload with its own
--   result id kept, and that result row takes this task, args and kwargs ('replace': its
--   priority and run_after too); outcome 'changed'. No second result row is made, so a
--   replaced enqueue leaves nothing READY behind.
CREATE OR REPLACE FUNCTION lonnymq_enqueue_task_keyed_v1(
    p_queue            text,
    p_channel          text,
    p_payload          jsonb,
    p_run_at_ms        bigint,
    p_priority         integer,
    p_max_attempts     integer,
    p_run_after        timestamptz,
    p_enqueued_at      timestamptz,
    p_dedup_key        text,
    p_on_duplicate     text,
    p_priority_step_ms bigint DEFAULT 1000,
    p_tolerance_ms     bigint DEFAULT 50,
    OUT outcome        text,
    OUT result         lonnymq_task_result
)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_field      text;
    v_dequeue_at bigint;
    v_channel_id bigint;
    v_new_id     bigint;
    v_old_result text;
    v_payload    jsonb := p_payload;
    v_id         bigint;
    v_wake_at    bigint;
BEGIN
    IF p_payload IS NULL OR pg_catalog.jsonb_typeof(p_payload) IS DISTINCT FROM 'object' THEN
        PERFORM lonnymq_raise_invalid_v1('payload', 'must be a task message (a JSON object)', pg_catalog.left(p_payload::text, 100));
    ELSIF pg_catalog.jsonb_path_exists(p_payload, 'strict $.**{101}'::jsonpath) THEN
        PERFORM lonnymq_raise_too_deep_v1('payload'::text, p_payload);
    END IF;
    FOREACH v_field IN ARRAY ARRAY['result_id', 'backend', 'task']::text[] LOOP
        IF pg_catalog.jsonb_typeof(p_payload OPERATOR(pg_catalog.->) v_field) IS DISTINCT FROM 'string'
           OR pg_catalog.char_length(p_payload OPERATOR(pg_catalog.->>) v_field) NOT BETWEEN 1 AND 1000 THEN
            PERFORM lonnymq_raise_invalid_v1('payload.' OPERATOR(pg_catalog.||) v_field, 'must be a string of 1 to 1000 characters',
                                              pg_catalog.left((p_payload OPERATOR(pg_catalog.->) v_field)::text, 100));
        END IF;
    END LOOP;
    IF pg_catalog.jsonb_typeof(p_payload OPERATOR(pg_catalog.->) 'args'::text) IS DISTINCT FROM 'array' THEN
        PERFORM lonnymq_raise_invalid_v1('payload.args', 'must be a JSON array', NULL);
    END IF;
    IF pg_catalog.jsonb_typeof(p_payload OPERATOR(pg_catalog.->) 'kwargs'::text) IS DISTINCT FROM 'object' THEN
        PERFORM lonnymq_raise_invalid_v1('payload.kwargs', 'must be a JSON object', NULL);
    END IF;
    IF p_enqueued_at IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('enqueued_at', 'must not be null', NULL);
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts NOT BETWEEN 1 AND 1000 THEN
        PERFORM lonnymq_raise_invalid_v1('max_attempts', 'must be between 1 and 1000', p_max_attempts::text);
    END IF;
    IF p_dedup_key IS NULL OR pg_catalog.char_length(p_dedup_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM lonnymq_raise_invalid_v1('dedup_key', 'must be 1 to 200 characters', pg_catalog.quote_nullable(p_dedup_key));
    END IF;
    IF p_on_duplicate IS NULL OR p_on_duplicate NOT IN ('skip', 'replace', 'update') THEN
        PERFORM lonnymq_raise_invalid_v1('on_duplicate', 'must be skip, replace or update',
                                         pg_catalog.quote_nullable(p_on_duplicate));
    END IF;
    IF p_tolerance_ms IS NULL OR p_tolerance_ms NOT BETWEEN 0 AND 86400000 THEN
        PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    END IF;
    v_dequeue_at := lonnymq_dequeue_at_v1(lonnymq_now_ms_v1(), p_run_at_ms, NULL::bigint, p_priority, p_priority_step_ms);
    v_channel_id := lonnymq_channel_id_v1(p_queue, p_channel);

    -- "An enqueue into this channel is in flight": dequeuers will not park it meanwhile.
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(v_channel_id));
    -- No prune or delete_channel deletes its row until this transaction ends: the hold of
    -- lonnymq_hold_channels_v1, written out (a call per enqueue costs more than the lock).
    PERFORM 1 FROM lonnymq_channel c WHERE c.id = v_channel_id FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM lonnymq_hold_channels_v1(ARRAY[v_channel_id]);  -- gone: raises ChannelGone
    END IF;
    v_new_id := pg_catalog.nextval('lonnymq_message_id_seq');

    IF p_on_duplicate <> 'skip' THEN
        -- The key's row, locked (lonnymq_enqueue_keyed_v1 then finds it held by this
        -- transaction): its message, and so the result read here, cannot change meanwhile.
        -- A key another producer has just written is not seen here (not yet committed); the
        -- result of the message changed is then looked up once the key's row is held, below.
        SELECT r.id INTO v_old_result
          FROM lonnymq_dedup d JOIN lonnymq_task_result r ON r.message_id = d.message_id
         WHERE d.channel_id = v_channel_id AND d.dedup_key = p_dedup_key
           FOR UPDATE OF d;
        IF v_old_result IS NOT NULL THEN
            v_payload := p_payload OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('result_id', v_old_result);
        END IF;
    END IF;

    SELECT k.id, k.wake_at INTO v_id, v_wake_at
      FROM lonnymq_enqueue_keyed_v1(v_channel_id, p_dedup_key, p_on_duplicate, v_new_id, v_payload,
                                    v_dequeue_at, p_priority, p_max_attempts) k;
    IF v_wake_at IS NOT NULL THEN
        PERFORM lonnymq_mark_v1(p_queue, v_channel_id, v_wake_at, p_tolerance_ms);
    END IF;

    IF v_id = v_new_id THEN
        -- A new message, with its own result.
        IF v_payload IS DISTINCT FROM p_payload THEN
            -- The key's message started or finished: the new message carries its own result id.
            UPDATE lonnymq_message m SET payload = p_payload WHERE m.id = v_new_id;
        END IF;
        outcome := 'created';
    ELSIF p_on_duplicate = 'skip' THEN
        SELECT * INTO result FROM lonnymq_task_result r WHERE r.message_id = v_id;
        IF NOT FOUND THEN
            PERFORM lonnymq_raise_invalid_v1('dedup_key',
                'names a message that has no task result (not a task message, or its result was pruned)',
                pg_catalog.quote_literal(p_dedup_key));
        END IF;
        outcome := 'skipped';
        RETURN;
    ELSE
        -- The key's waiting message took v_payload. This transaction now holds the key's row
        -- and the message's row.
        outcome := 'changed';
        IF v_old_result IS NULL THEN
            SELECT r.id INTO v_old_result FROM lonnymq_task_result r WHERE r.message_id = v_id;
            IF FOUND THEN  -- written by a producer that committed after the first look
                UPDATE lonnymq_message m
                   SET payload = p_payload OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('result_id', v_old_result)
                 WHERE m.id = v_id;
            END IF;
        END IF;
        IF v_old_result IS NOT NULL THEN
            UPDATE lonnymq_task_result r
               SET backend = p_payload OPERATOR(pg_catalog.->>) 'backend'::text,
                   task_path = p_payload OPERATOR(pg_catalog.->>) 'task'::text,
                   args = p_payload OPERATOR(pg_catalog.->) 'args'::text,
                   kwargs = p_payload OPERATOR(pg_catalog.->) 'kwargs'::text,
                   priority = CASE WHEN p_on_duplicate = 'replace' THEN p_priority ELSE r.priority END,
                   run_after = CASE WHEN p_on_duplicate = 'replace' THEN p_run_after ELSE r.run_after END
             WHERE r.id = v_old_result
            RETURNING * INTO result;
            RETURN;
        END IF;
        -- A plain message of the key (no result row): it is this task's now.
    END IF;
    INSERT INTO lonnymq_task_result (id, backend, task_path, queue, channel, message_id, status, args, kwargs,
                                     priority, run_after, enqueued_at)
    VALUES (p_payload OPERATOR(pg_catalog.->>) 'result_id'::text, p_payload OPERATOR(pg_catalog.->>) 'backend'::text,
            p_payload OPERATOR(pg_catalog.->>) 'task'::text, p_queue, p_channel, v_id, 'READY',
            p_payload OPERATOR(pg_catalog.->) 'args'::text, p_payload OPERATOR(pg_catalog.->) 'kwargs'::text,
            p_priority, p_run_after, p_enqueued_at)
    RETURNING * INTO result;
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
-- Delete every message of a channel that is not in flight (and free their dedup keys).
-- Returns how many. Reads them along the ready index (lease_until IS NULL, which a CHECK
-- makes the same as lease_token IS NULL; the planner needs the index's own predicate).
CREATE OR REPLACE FUNCTION lonnymq_purge_channel_v1(p_channel_id bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n integer;
BEGIN
    WITH gone AS (
        DELETE FROM lonnymq_message m
         WHERE m.channel_id = p_channel_id AND m.lease_until IS NULL AND m.lease_token IS NULL
        RETURNING m.id, m.dedup_key
    ), freed AS (
        DELETE FROM lonnymq_dedup d USING gone g
         WHERE d.channel_id = p_channel_id AND d.dedup_key = g.dedup_key AND d.message_id = g.id
    )
    SELECT pg_catalog.count(*) INTO v_n FROM gone;
    RETURN v_n;
END
$$;
-- Put steps (locked by the caller, ready: pending = 0) into the message table, as an
-- enqueue would: channels created in name order, each channel's shared advisory lock, one
-- wake-up mark per channel (which NOTIFYs the queue's workers at commit).
CREATE OR REPLACE FUNCTION lonnymq_workflow_release_v1(p_ids bigint[], p_tolerance_ms bigint) RETURNS integer
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
-- Release steps (locked by the caller, ready: every parent succeeded) into the message table,
-- as an enqueue would: channels created in name order, each channel's shared advisory lock,
-- then one statement that marks the steps queued (their pending count 0, their payload
-- forgotten) and inserts their messages from the payloads they held, then one wake-up mark
-- per channel (which NOTIFYs the queue's workers at commit). One update per step: the
-- caller does not lower a released step's count first. Returns how many were released.
CREATE OR REPLACE FUNCTION lonnymq_workflow_release_v2(p_ids bigint[], p_tolerance_ms bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now      bigint := lonnymq_now_ms_v1();
    v_group    record;
    v_queues   text[] := ARRAY[]::text[];
    v_channels text[] := ARRAY[]::text[];
    v_ids      bigint[] := ARRAY[]::bigint[];
    v_delays   bigint[] := ARRAY[]::bigint[];
    v_n        integer := 0;
BEGIN
    IF p_ids IS NULL OR pg_catalog.cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    FOR v_group IN
        SELECT s.queue, s.channel, pg_catalog.min(s.delay_ms) AS delay_ms
          FROM lonnymq_workflow_step s
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting'
         GROUP BY s.queue, s.channel ORDER BY s.queue, s.channel
    LOOP
        v_queues := v_queues OPERATOR(pg_catalog.||) v_group.queue;
        v_channels := v_channels OPERATOR(pg_catalog.||) v_group.channel;
        v_ids := v_ids OPERATOR(pg_catalog.||) lonnymq_channel_id_v1(v_group.queue, v_group.channel);
        v_delays := v_delays OPERATOR(pg_catalog.||) v_group.delay_ms;
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(),
                                                       lonnymq_lock_key_v1(v_ids[pg_catalog.cardinality(v_ids)]));
    END LOOP;
    IF pg_catalog.cardinality(v_ids) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM lonnymq_hold_channels_v1(v_ids);
    WITH released AS (
        UPDATE lonnymq_workflow_step s
           SET state = 'queued', pending = 0, payload = NULL, releases = s.releases + 1,
               released_at = pg_catalog.now()
          FROM lonnymq_workflow_step o
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting' AND o.id = s.id
        RETURNING s.id, s.queue, s.channel, o.payload, s.delay_ms, s.max_attempts, s.workflow_id
    ), inserted AS (
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
        SELECT r.id, c.id, r.payload, v_now + r.delay_ms, 0, r.max_attempts,
               'lonnymq.step:' OPERATOR(pg_catalog.||) r.workflow_id::text
          FROM released r
          JOIN ROWS FROM (pg_catalog.unnest(v_queues), pg_catalog.unnest(v_channels), pg_catalog.unnest(v_ids))
               AS c(queue, channel, id) ON c.queue = r.queue AND c.channel = r.channel
         ORDER BY r.id
        RETURNING 1
    )
    SELECT pg_catalog.count(*)::integer INTO v_n FROM inserted;
    FOR i IN 1 .. pg_catalog.cardinality(v_ids) LOOP
        PERFORM lonnymq_mark_v1(v_queues[i], v_ids[i], v_now + v_delays[i], p_tolerance_ms);
    END LOOP;
    RETURN v_n;
END
$$;
-- Delete a channel only while it holds no message and no enqueue into it is in flight.
-- Returns 'deleted', 'not_empty', 'busy' (a producer or dequeuer holds it: try again) or
-- 'missing'. Dead messages keep their queue and channel names (requeue recreates the
-- channel). The emptiness test is the only guard (lonnymq_message has no foreign key since
-- 0036): it runs after both locks, on a snapshot that sees every message committed before
-- them, which needs READ COMMITTED (LQ006 otherwise; docs/locking.md "Pruning a channel").
CREATE OR REPLACE FUNCTION lonnymq_delete_channel_v1(p_id bigint) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'delete_channel needs READ COMMITTED, the session runs %', pg_catalog.current_setting('transaction_isolation')
            USING ERRCODE = 'LQ006';
    END IF;
    PERFORM 1 FROM lonnymq_channel c WHERE c.id = p_id;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    SELECT c.id INTO v_id FROM lonnymq_channel c WHERE c.id = p_id FOR UPDATE SKIP LOCKED;
    IF v_id IS NULL
       OR NOT pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(p_id)) THEN
        RETURN 'busy';
    END IF;
    IF EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.channel_id = p_id AND m.lease_until IS NULL)
       OR EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.lease_until IS NOT NULL AND m.channel_id = p_id) THEN
        RETURN 'not_empty';
    END IF;
    -- Its wake-up marks too: dequeues apply marks through the channel row, so a deleted
    -- channel's marks would otherwise stay forever.
    DELETE FROM lonnymq_wake w WHERE w.channel_id = p_id;
    DELETE FROM lonnymq_release_count r WHERE r.channel_id = p_id;
    DELETE FROM lonnymq_channel c WHERE c.id = p_id;
    RETURN 'deleted';
END
$$;
-- Delete up to p_limit channels (each holds an advisory lock until the statement ends, from
-- the server's shared lock table: the workers ask for 200) that nobody configured (lonnymq_channel_configured_v1), that
-- hold no message in any state and no dedup key, and that were neither created nor released
-- from in the last p_idle_ms (LONNYMQ_CHANNEL_IDLE_PRUNE; the workers' housekeeping calls
-- this). Their wake-up marks and release counts go with them; their releases are added to
-- lonnymq_queue_released. Returns how many it deleted. Never waits for a producer or a
-- dequeuer: a channel one of them holds is skipped, for a later call.
-- Candidates are parked channels (next_dequeue_at NULL: a dequeue found them empty, or they
-- are new): a cheap test that spares the probes of the message table for every channel with
-- a backlog (a channel with a turn is pruned once a dequeue has parked it).
-- Locking (docs/locking.md, "Pruning a channel"): 1. the candidates' rows FOR UPDATE SKIP
-- LOCKED (a producer with an uncommitted message holds KEY SHARE on its channel, dequeuers
-- and configure hold NO KEY UPDATE: all skipped), then each one's exclusive advisory lock,
-- tried (a producer between its lookup and its insert holds it shared: skipped); 2. in a new
-- statement (a snapshot taken after both locks), the delete tests emptiness again, so a
-- message committed after the first statement's snapshot keeps its channel. That second
-- look is the only guard (lonnymq_message has no foreign key since 0036), and it needs READ
-- COMMITTED for its fresh snapshot: LQ006 otherwise, as dequeue. Emptiness is a probe of
-- the ready index and a look along the lease index (messages in flight: a few per worker).
CREATE OR REPLACE FUNCTION lonnymq_prune_channels_v1(p_idle_ms bigint, p_limit integer DEFAULT 200)
RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_cutoff_ms bigint;
    v_cutoff_at timestamptz;
    v_locked    bigint[];
    v_gone      integer;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'prune needs READ COMMITTED, the session runs %', pg_catalog.current_setting('transaction_isolation')
            USING ERRCODE = 'LQ006';
    END IF;
    PERFORM lonnymq_check_range_v1('idle', p_idle_ms, 1::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('limit', p_limit::bigint, 1::bigint, 10000::bigint, false);
    v_cutoff_ms := lonnymq_now_ms_v1() - p_idle_ms;
    v_cutoff_at := pg_catalog.clock_timestamp()
                   - pg_catalog.make_interval(secs => p_idle_ms::double precision / 1000::double precision);

    SELECT pg_catalog.array_agg(k.id ORDER BY k.id) INTO v_locked
      FROM (SELECT c.id FROM lonnymq_channel c
             WHERE c.next_dequeue_at IS NULL
               AND c.created_at < v_cutoff_at
               AND (c.last_dequeue_at IS NULL OR c.last_dequeue_at < v_cutoff_ms)
               AND NOT lonnymq_channel_configured_v1(c)
               AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.channel_id = c.id AND m.lease_until IS NULL)
               AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.lease_until IS NOT NULL AND m.channel_id = c.id)
               AND NOT EXISTS (SELECT 1 FROM lonnymq_dedup d WHERE d.channel_id = c.id)
             LIMIT p_limit
               FOR UPDATE OF c SKIP LOCKED) k
     WHERE pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(k.id));
    IF v_locked IS NULL THEN
        RETURN 0;
    END IF;

    WITH gone AS (
        DELETE FROM lonnymq_channel c
         WHERE c.id = ANY (v_locked)
           AND NOT lonnymq_channel_configured_v1(c)
           AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.channel_id = c.id AND m.lease_until IS NULL)
           AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.lease_until IS NOT NULL AND m.channel_id = c.id)
           AND NOT EXISTS (SELECT 1 FROM lonnymq_dedup d WHERE d.channel_id = c.id)
        RETURNING c.id, c.queue, c.released_total
    ), marks AS (
        DELETE FROM lonnymq_wake w WHERE w.channel_id IN (SELECT g.id FROM gone g)
    ), counts AS (
        DELETE FROM lonnymq_release_count r WHERE r.channel_id IN (SELECT g.id FROM gone g)
        RETURNING r.channel_id, r.released
    ), folded AS (
        INSERT INTO lonnymq_queue_released AS q (queue, released)
        SELECT t.queue, pg_catalog.sum(t.n)::bigint
          FROM (SELECT g.queue, g.released_total AS n FROM gone g
                UNION ALL
                SELECT g.queue, r.released FROM counts r JOIN gone g ON g.id = r.channel_id) t
         GROUP BY t.queue
        HAVING pg_catalog.sum(t.n) > 0::numeric
         ORDER BY t.queue
        ON CONFLICT (queue) DO UPDATE SET released = q.released + excluded.released
    )
    SELECT pg_catalog.count(*)::integer INTO v_gone FROM gone;
    RETURN v_gone;
END
$$;
-- Scheduler invariants, for tests, api.check() and the health command. One row per problem:
--   in_flight_mismatch: in_flight differs from the leases that took a slot;
--   queue_in_flight_mismatch: a queue-wide cap's in_flight differs from the leases of the
--     queue that took a queue slot (channel_id and channel NULL);
--   stranded: a ready message is due but its channel will not look at it;
--   orphaned: messages whose channel row is missing (channel_id the missing id, queue and
--     channel NULL): lonnymq_message has no foreign key (0036), and this proves what it did.
--     The channels are read from the two message indexes (the ready index by skipping from
--     one channel to the next, the lease index whole), not from the backlog.
-- Its work does not grow with the backlog (docs/admin.md, "At size"): the leases are read
-- along the lease index (a slot or a queue slot needs a lease: CHECKs of lonnymq_message),
-- and only the channels that could be stranded have their head looked up: a channel whose
-- turn is at most now + grace away cannot be (the turn it waits for has come, or is within
-- grace), so the one-probe-per-channel walk is over the parked channels (no turn) and those
-- whose turn is further off. One clock reading serves the whole check.
CREATE OR REPLACE FUNCTION lonnymq_check_v2(p_grace_ms bigint DEFAULT 1000)
RETURNS TABLE (channel_id bigint, queue text, channel text, problem text, detail text)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_now bigint;
BEGIN
    PERFORM lonnymq_check_range_v1('grace', p_grace_ms, 0::bigint, 86400000::bigint, false);
    v_now := lonnymq_now_ms_v1();
    RETURN QUERY
        SELECT c.id, c.queue, c.name, 'in_flight_mismatch',
               pg_catalog.format('in_flight=%s, slot-taking leases=%s', c.in_flight, coalesce(s.n, 0))
          FROM lonnymq_channel c
          LEFT JOIN (SELECT m.channel_id, pg_catalog.count(*) AS n FROM lonnymq_message m
                      WHERE m.lease_until IS NOT NULL AND m.slot_taken
                      GROUP BY m.channel_id) s ON s.channel_id = c.id
         WHERE c.in_flight <> coalesce(s.n, 0)
        UNION ALL
        SELECT NULL::bigint, qc.queue, NULL::text, 'queue_in_flight_mismatch',
               pg_catalog.format('in_flight=%s, slot-taking leases=%s', qc.in_flight, coalesce(s.n, 0))
          FROM lonnymq_queue_config qc
          LEFT JOIN (SELECT c.queue, pg_catalog.count(*) AS n
                       FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
                      WHERE m.lease_until IS NOT NULL AND m.queue_slot
                      GROUP BY c.queue) s ON s.queue = qc.queue
         WHERE qc.max_concurrency IS NOT NULL AND qc.in_flight <> coalesce(s.n, 0)
        UNION ALL
        SELECT c.id, c.queue, c.name, 'stranded',
               pg_catalog.format('head due at %s, next_dequeue_at=%s', h.dequeue_at, coalesce(c.next_dequeue_at::text, 'null'))
          FROM lonnymq_channel c
          CROSS JOIN LATERAL (SELECT mm.dequeue_at FROM lonnymq_message mm
                               WHERE mm.channel_id = c.id AND mm.lease_until IS NULL
                               ORDER BY mm.dequeue_at, mm.id LIMIT 1) h
         WHERE NOT c.paused
           -- The candidates, from the channel row alone (implied by the turn's test below,
           -- whose greatest() is at least now).
           AND (c.next_dequeue_at IS NULL OR c.next_dequeue_at > v_now + p_grace_ms)
           AND h.dequeue_at < v_now - p_grace_ms
           -- Its next turn is missing, or later than the head (and the rate limit) need and
           -- still ahead: a turn that has already come is eligible now, however old the head.
           AND (c.next_dequeue_at IS NULL
                OR c.next_dequeue_at > greatest(h.dequeue_at, c.last_dequeue_at + c.release_interval_ms,
                                                c.next_token_at, v_now) + p_grace_ms)
           -- A producer's committed wake-up mark is applied by the next dequeue.
           AND NOT EXISTS (SELECT 1 FROM lonnymq_wake w
                            WHERE w.channel_id = c.id
                              AND w.dequeue_at <= greatest(h.dequeue_at, v_now) + p_grace_ms)
        UNION ALL
        SELECT o.channel_id, NULL::text, NULL::text, 'orphaned',
               pg_catalog.format('%s message(s) of channel %s, which does not exist',
                                 (SELECT pg_catalog.count(*) FROM lonnymq_message m
                                   WHERE m.channel_id = o.channel_id AND m.lease_until IS NULL)
                                 + (SELECT pg_catalog.count(*) FROM lonnymq_message m
                                     WHERE m.lease_until IS NOT NULL AND m.channel_id = o.channel_id),
                                 o.channel_id)
          FROM (WITH RECURSIVE waiting(channel_id) AS (
                    (SELECT m.channel_id FROM lonnymq_message m WHERE m.lease_until IS NULL
                      ORDER BY m.channel_id LIMIT 1)
                    UNION ALL
                    SELECT (SELECT m.channel_id FROM lonnymq_message m
                             WHERE m.lease_until IS NULL AND m.channel_id > w.channel_id
                             ORDER BY m.channel_id LIMIT 1)
                      FROM waiting w WHERE w.channel_id IS NOT NULL
                )
                SELECT w.channel_id FROM waiting w WHERE w.channel_id IS NOT NULL
                UNION
                SELECT m.channel_id FROM lonnymq_message m WHERE m.lease_until IS NOT NULL) o
         WHERE NOT EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.id = o.channel_id);
END
$$;
-- Every function that writes a new message now holds its channel itself.
ALTER TABLE lonnymq_message DROP CONSTRAINT lonnymq_message_channel_id_fkey;
DROP INDEX lonnymq_message_channel_idx;
