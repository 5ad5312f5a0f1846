-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0025: dedup modes, what a repeated dedup key does (docs/flow-control.md).
-- - lonnymq_enqueue_keyed_v1 (new): the rule of a keyed enqueue with a mode: 'skip' (the
--   key's message stands), 'replace' (debounce: a waiting message takes the new payload and
--   run time), 'update' (throttle: the new payload, the run time kept); a running or finished
--   message is never touched, the key then names one new waiting message.
-- - lonnymq_enqueue_v2, lonnymq_enqueue_many_v2, lonnymq_publish_v2 (new): the v1 functions
--   plus p_on_duplicate. The v1 functions stay as they were ('skip'), for the code of the
--   previous release and for the functions that call them (tasks, schedules).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- A keyed enqueue in mode 'replace' or 'update' (or 'skip', for a batch that mixes modes on
-- its keys): the one place that rule lives, for lonnymq_enqueue_v2 and
-- lonnymq_enqueue_many_v2. The caller has checked the row, holds the channel's shared
-- advisory lock and drew p_new_id for the row. The key's message is looked at as of now:
-- - no key (or the key was pruned, cancelled or its enqueue rolled back): a new message;
-- - 'skip': the key's message id, whatever became of that message (today's dedup);
-- - the key's message is waiting (ready, scheduled or backing off): 'replace' gives it the
--   payload, the run time, the priority and max_attempts of this enqueue; 'update' the
--   payload only. Its id, attempts and enqueued_at stay;
-- - the key's message is running (leased), or is gone (acked, dead): a new waiting message,
--   and the key names it from now on (its window restarts). A running message is never
--   touched, and enqueues never give a key two waiting messages.
-- Concurrent enqueues of one key queue up on the key's row (FOR UPDATE). The message row is
-- changed only while waiting: the UPDATE waits for a dequeuer that is leasing it and then
-- finds it leased. No lock is taken on a running message, so its ack never waits for a
-- producer's transaction. Returns the message id and the release time to wake the channel
-- for (NULL: none needed).
CREATE FUNCTION lonnymq_enqueue_keyed_v1(
    p_channel_id    bigint,
    p_dedup_key     text,
    p_on_duplicate  text,
    p_new_id        bigint,
    p_payload       jsonb,
    p_dequeue_at    bigint,
    p_priority      integer,
    p_max_attempts  integer,
    OUT id          bigint,
    OUT wake_at     bigint
)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_held bigint;
BEGIN
    FOR v_try IN 1 .. 100 LOOP
        INSERT INTO lonnymq_dedup (channel_id, dedup_key, message_id)
        VALUES (p_channel_id, p_dedup_key, p_new_id)
        ON CONFLICT (channel_id, dedup_key) DO NOTHING;
        IF FOUND THEN
            INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
            VALUES (p_new_id, p_channel_id, p_payload, p_dequeue_at, p_priority, p_max_attempts, p_dedup_key);
            id := p_new_id;
            wake_at := p_dequeue_at;
            RETURN;
        END IF;
        IF p_on_duplicate = 'skip' THEN
            SELECT d.message_id INTO v_held FROM lonnymq_dedup d
             WHERE d.channel_id = p_channel_id AND d.dedup_key = p_dedup_key;
        ELSE
            SELECT d.message_id INTO v_held FROM lonnymq_dedup d
             WHERE d.channel_id = p_channel_id AND d.dedup_key = p_dedup_key
               FOR UPDATE;
        END IF;
        CONTINUE WHEN NOT FOUND;  -- freed meanwhile: claim it again
        id := v_held;
        IF p_on_duplicate = 'skip' THEN
            RETURN;
        ELSIF p_on_duplicate = 'replace' THEN
            UPDATE lonnymq_message m
               SET payload = p_payload, dequeue_at = p_dequeue_at, priority = p_priority,
                   max_attempts = p_max_attempts
             WHERE m.id = v_held AND m.lease_until IS NULL;
            IF FOUND THEN
                wake_at := p_dequeue_at;
                RETURN;
            END IF;
        ELSE
            UPDATE lonnymq_message m SET payload = p_payload
             WHERE m.id = v_held AND m.lease_until IS NULL;
            IF FOUND THEN
                RETURN;
            END IF;
        END IF;
        -- Running or gone: one new waiting message, which the key names from now on.
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
        VALUES (p_new_id, p_channel_id, p_payload, p_dequeue_at, p_priority, p_max_attempts, p_dedup_key);
        UPDATE lonnymq_dedup d SET message_id = p_new_id, created_at = pg_catalog.now()
         WHERE d.channel_id = p_channel_id AND d.dedup_key = p_dedup_key;
        id := p_new_id;
        wake_at := p_dequeue_at;
        RETURN;
    END LOOP;
    RAISE EXCEPTION 'dedup key % kept changing under this enqueue; retry the transaction', p_dedup_key
        USING ERRCODE = '40001';
END
$$;

-- One message with a dedup mode (docs/flow-control.md): lonnymq_enqueue_v1 plus
-- p_on_duplicate, 'skip' (the key's first message stands: v1's behaviour), 'replace'
-- (debounce) or 'update' (throttle); see lonnymq_enqueue_keyed_v1. A mode other than 'skip'
-- needs a dedup key. Returns the id of the message the enqueue created or changed.
CREATE FUNCTION lonnymq_enqueue_v2(
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
CREATE FUNCTION lonnymq_enqueue_many_v2(
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

-- Publish events to a topic: each event becomes one message in every queue subscribed to it,
-- in the caller's transaction, through lonnymq_enqueue_many_v2 queue by queue in queue-name
-- order (so concurrent publishers take their locks in one order). An event's key names its
-- channel in each queue (NULL: 'default'); p_on_duplicate is each event's dedup mode. Returns
-- one row per subscribed queue, with the message ids in event order; no row when the topic
-- has no subscriber, whose events are counted in lonnymq_unrouted instead (their modes
-- checked all the same).
CREATE FUNCTION lonnymq_publish_v2(
    p_topic                text,
    p_keys                 text[],
    p_payloads             jsonb[],
    p_run_at_ms            bigint[]  DEFAULT NULL,
    p_dedup_keys           text[]    DEFAULT NULL,
    p_on_duplicate         text[]    DEFAULT NULL,
    p_default_max_attempts integer   DEFAULT 5,
    p_priority_step_ms     bigint    DEFAULT 1000,
    p_tolerance_ms         bigint    DEFAULT 50
) RETURNS TABLE (queue text, ids bigint[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n        integer := coalesce(pg_catalog.cardinality(p_payloads), 0);
    v_channels text[];
    v_bad      record;
    v_queue    text;
    v_routed   boolean := false;
BEGIN
    PERFORM lonnymq_check_topic_v1(p_topic);
    IF (p_keys IS NOT NULL AND pg_catalog.cardinality(p_keys) <> v_n)
       OR (p_run_at_ms IS NOT NULL AND pg_catalog.cardinality(p_run_at_ms) <> v_n)
       OR (p_dedup_keys IS NOT NULL AND pg_catalog.cardinality(p_dedup_keys) <> v_n)
       OR (p_on_duplicate IS NOT NULL AND pg_catalog.cardinality(p_on_duplicate) <> v_n) THEN
        PERFORM lonnymq_raise_invalid_v1('events', 'arrays must all have the same length', v_n::text);
    END IF;
    PERFORM lonnymq_check_list_v1('keys', pg_catalog.array_ndims(p_keys));
    PERFORM lonnymq_check_list_v1('payloads', pg_catalog.array_ndims(p_payloads));
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- A key is a channel name: the first bad one is named as events[i].key (from 0).
    SELECT u.k, u.ord INTO v_bad
      FROM pg_catalog.unnest(p_keys) WITH ORDINALITY AS u(k, ord)
     WHERE u.k IS NOT NULL AND (pg_catalog.char_length(u.k) NOT BETWEEN 1 AND 200 OR u.k !~ '\S')
     ORDER BY u.ord
     LIMIT 1;
    IF FOUND THEN
        PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('events[%s].key', v_bad.ord - 1),
            'must be 1 to 200 characters, not only blanks', pg_catalog.quote_literal(v_bad.k));
    END IF;
    IF p_keys IS NULL THEN
        v_channels := pg_catalog.array_fill('default'::text, ARRAY[v_n]);
    ELSE
        SELECT pg_catalog.array_agg(coalesce(u.k, 'default'::text) ORDER BY u.ord) INTO v_channels
          FROM pg_catalog.unnest(p_keys) WITH ORDINALITY AS u(k, ord);
    END IF;

    FOR v_queue IN SELECT s.queue FROM lonnymq_subscription s WHERE s.topic = p_topic ORDER BY s.queue LOOP
        v_routed := true;
        queue := v_queue;
        ids := lonnymq_enqueue_many_v2(v_queue, v_channels, p_payloads, p_run_at_ms, NULL::bigint[],
                                       NULL::integer[], p_dedup_keys, p_on_duplicate, NULL::integer[],
                                       p_default_max_attempts, p_priority_step_ms, p_tolerance_ms);
        RETURN NEXT;
    END LOOP;
    IF NOT v_routed THEN
        -- Still checked, as a routed publish would be: a bad event is an error either way.
        PERFORM lonnymq_check_range_v1('max_attempts', p_default_max_attempts::bigint, 1::bigint, 1000::bigint, false);
        PERFORM lonnymq_check_list_v1('on_duplicate', pg_catalog.array_ndims(p_on_duplicate));
        SELECT u.mode, u.ord INTO v_bad
          FROM ROWS FROM (pg_catalog.unnest(p_on_duplicate), pg_catalog.unnest(p_dedup_keys)) WITH ORDINALITY AS u(mode, k, ord)
         WHERE u.mode IS NOT NULL AND (u.mode NOT IN ('skip', 'replace', 'update') OR (u.mode <> 'skip' AND u.k IS NULL))
         ORDER BY u.ord
         LIMIT 1;
        IF FOUND THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].on_duplicate', v_bad.ord - 1),
                CASE WHEN v_bad.mode IN ('skip', 'replace', 'update') THEN 'needs a dedup_key'
                     ELSE 'must be skip, replace or update' END,
                pg_catalog.quote_literal(v_bad.mode));
        END IF;
        INSERT INTO lonnymq_unrouted AS r (topic, events, last_published_at)
        VALUES (p_topic, v_n::bigint, pg_catalog.now())
        ON CONFLICT (topic) DO UPDATE
           SET events = r.events + EXCLUDED.events, last_published_at = EXCLUDED.last_published_at;
    END IF;
END
$$;
