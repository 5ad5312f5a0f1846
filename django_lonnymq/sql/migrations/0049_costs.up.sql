-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0049: costs. enqueue(cost=k) and enqueue_many (costs per item): a message
-- takes k tokens of its channel's and its queue's token buckets. The message and dead-letter
-- tables get a cost column (1 by default: a new column with a constant default rewrites no
-- row; the CHECK reads the table once). lonnymq_enqueue_v3, lonnymq_enqueue_many_v3 and
-- lonnymq_enqueue_keyed_v2 take the cost (their _v2/_v1 stay installed for the previous
-- release: superseded.sql); lonnymq_dequeue_v1 spends a message's cost from the buckets;
-- the dead letters keep it; the Task, schedule, topic and workflow functions call the new
-- enqueues at cost 1. Same names, arguments and results for the functions replaced.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

ALTER TABLE lonnymq_message
    ADD COLUMN cost integer NOT NULL DEFAULT 1,
    ADD CONSTRAINT lonnymq_message_cost_range CHECK (cost BETWEEN 1 AND 1000000);
ALTER TABLE lonnymq_dead_message
    ADD COLUMN cost integer NOT NULL DEFAULT 1,
    ADD CONSTRAINT lonnymq_dead_message_cost_range CHECK (cost BETWEEN 1 AND 1000000);

-- A message that costs more than its channel's (or its queue's) token bucket can ever hold
-- could never be released: refused (LQ001, field cost) before anything is written. Called
-- only for costs above 1, so a queue that never uses costs pays nothing for it. A bucket
-- configured smaller later releases such a message once the bucket is full (the dequeue
-- charges at most the burst).
CREATE FUNCTION lonnymq_check_costs_v1(p_queue text, p_channel_ids bigint[], p_costs integer[], p_batch boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_bad record;
BEGIN
    SELECT u.cost, u.ord, c.name, c.rate_burst AS burst, 'channel' AS kind INTO v_bad
      FROM ROWS FROM (pg_catalog.unnest(p_channel_ids), pg_catalog.unnest(p_costs)) WITH ORDINALITY AS u(channel_id, cost, ord)
      JOIN lonnymq_channel c ON c.id = u.channel_id
     WHERE u.cost > 1 AND c.rate_burst IS NOT NULL AND u.cost > c.rate_burst
     ORDER BY u.ord
     LIMIT 1;
    IF NOT FOUND THEN
        SELECT u.cost, u.ord, p_queue AS name, qc.rate_burst AS burst, 'queue' AS kind INTO v_bad
          FROM pg_catalog.unnest(p_costs) WITH ORDINALITY AS u(cost, ord)
          JOIN lonnymq_queue_config qc ON qc.queue = p_queue
         WHERE qc.rate_burst IS NOT NULL AND u.cost > qc.rate_burst
         ORDER BY u.ord
         LIMIT 1;
    END IF;
    IF v_bad.cost IS NOT NULL THEN
        PERFORM lonnymq_raise_invalid_v1(CASE WHEN p_batch THEN pg_catalog.format('items[%s].cost', v_bad.ord - 1)
                                              ELSE 'cost' END,
            pg_catalog.format('must be at most the burst of %s %s''s token bucket (%s): a message that costs more could never be released',
                              v_bad.kind, pg_catalog.quote_literal(v_bad.name), v_bad.burst),
            v_bad.cost::text);
    END IF;
END
$$;

-- A keyed enqueue in mode 'replace' or 'update' (or 'skip', for a batch that mixes modes on
-- its keys): the one place that rule lives, for lonnymq_enqueue_v3 and
-- lonnymq_enqueue_many_v3. The caller has checked the row, holds the channel's shared
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
CREATE FUNCTION lonnymq_enqueue_keyed_v2(
    p_channel_id    bigint,
    p_dedup_key     text,
    p_on_duplicate  text,
    p_new_id        bigint,
    p_payload       jsonb,
    p_dequeue_at    bigint,
    p_priority      integer,
    p_max_attempts  integer,
    p_cost          integer,
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
            INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key, cost)
            VALUES (p_new_id, p_channel_id, p_payload, p_dequeue_at, p_priority, p_max_attempts, p_dedup_key, p_cost);
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
                   max_attempts = p_max_attempts, cost = p_cost
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
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key, cost)
        VALUES (p_new_id, p_channel_id, p_payload, p_dequeue_at, p_priority, p_max_attempts, p_dedup_key, p_cost);
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

-- One message with a dedup mode (docs/flow-control.md): the one single enqueue (api.enqueue,
-- a Django Task's message, a schedule's tick, a workflow's on_failure message). p_on_duplicate
-- is 'skip' (the key's first message stands), 'replace' (debounce) or 'update' (throttle); see
-- lonnymq_enqueue_keyed_v2. A mode other than 'skip'
-- needs a dedup key. p_cost: the tokens of the channel's and the queue's token buckets its
-- release takes (1 to 1,000,000; more than a bucket's burst is refused while the bucket
-- exists). Returns the id of the message the enqueue created or changed.
CREATE FUNCTION lonnymq_enqueue_v3(
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
    p_tolerance_ms      bigint  DEFAULT 50,
    p_cost              integer DEFAULT 1
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
    IF p_cost IS NULL OR p_cost NOT BETWEEN 1 AND 1000000 THEN
        PERFORM lonnymq_raise_invalid_v1('cost', 'must be an integer from 1 to 1000000', coalesce(p_cost::text, 'null'));
    END IF;
    v_dequeue_at := lonnymq_dequeue_at_v1(v_now, p_run_at_ms, p_delay_ms, p_priority, p_priority_step_ms);
    v_channel_id := lonnymq_channel_id_v1(p_queue, p_channel);

    -- "An enqueue into this channel is in flight": dequeuers will not park it meanwhile (its
    -- lock, or its stripe's past the transaction's 64th channel lock).
    PERFORM lonnymq_lock_channel_v1(v_channel_id);
    -- No prune or delete_channel deletes its row until this transaction ends: the hold of
    -- lonnymq_hold_channels_v1, written out (a call per enqueue costs more than the lock).
    PERFORM 1 FROM lonnymq_channel c WHERE c.id = v_channel_id FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM lonnymq_hold_channels_v1(ARRAY[v_channel_id]);  -- gone: raises ChannelGone
    END IF;
    IF p_cost > 1 THEN
        PERFORM lonnymq_check_costs_v1(p_queue, ARRAY[v_channel_id], ARRAY[p_cost], false);
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
          FROM lonnymq_enqueue_keyed_v2(v_channel_id, p_dedup_key, p_on_duplicate,
                                        pg_catalog.nextval('lonnymq_message_id_seq'), p_payload,
                                        v_dequeue_at, p_priority, p_max_attempts, p_cost) k;
        IF v_wake_at IS NOT NULL THEN
            PERFORM lonnymq_mark_v1(p_queue, v_channel_id, v_wake_at, p_tolerance_ms);
        END IF;
        RETURN v_id;
    END IF;

    INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key, cost)
    VALUES (v_id, v_channel_id, p_payload, v_dequeue_at, p_priority, p_max_attempts, p_dedup_key, p_cost);

    PERFORM lonnymq_mark_v1(p_queue, v_channel_id, v_dequeue_at, p_tolerance_ms);
    RETURN v_id;
END
$$;

-- Many messages of one queue, any channels, in one call. Returns the ids in input order (the
-- existing id where a dedup key repeats, also within the batch). NULL arrays mean "defaults
-- for every row". Channels are created in name order and locked in id order, and dedup keys
-- are claimed in (channel, key) order, so concurrent batches never deadlock, whatever their
-- row order. p_costs: each row's cost (NULL array or element: 1; see lonnymq_enqueue_v3).
-- p_on_duplicate is each row's dedup mode ('skip', 'replace' or 'update'; a NULL
-- array or element: 'skip'). A batch whose rows all skip runs as one set-based statement
-- (lonnymq_enqueue_many_v1's, unchanged). A batch with a 'replace' or 'update' row
-- inserts its keyless rows in that statement and applies its keyed rows through
-- lonnymq_enqueue_keyed_v2 one at a time, in (channel, key, input) order, each with the id
-- drawn for it in input order: the rows of one key behave as that many enqueues in input
-- order would, and every row gets the id of the message its enqueue created or changed.
CREATE FUNCTION lonnymq_enqueue_many_v3(
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
    p_tolerance_ms     bigint    DEFAULT 50,
    p_costs            integer[] DEFAULT NULL
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
    v_k_costs        integer[];
    v_k_wake_ids     bigint[] := ARRAY[]::bigint[];
    v_k_wake_ats     bigint[] := ARRAY[]::bigint[];
BEGIN
    IF coalesce(pg_catalog.cardinality(p_channels), 0) <> v_n
       OR (p_run_at_ms IS NOT NULL AND pg_catalog.cardinality(p_run_at_ms) <> v_n)
       OR (p_delay_ms IS NOT NULL AND pg_catalog.cardinality(p_delay_ms) <> v_n)
       OR (p_priorities IS NOT NULL AND pg_catalog.cardinality(p_priorities) <> v_n)
       OR (p_dedup_keys IS NOT NULL AND pg_catalog.cardinality(p_dedup_keys) <> v_n)
       OR (p_on_duplicate IS NOT NULL AND pg_catalog.cardinality(p_on_duplicate) <> v_n)
       OR (p_max_attempts IS NOT NULL AND pg_catalog.cardinality(p_max_attempts) <> v_n)
       OR (p_costs IS NOT NULL AND pg_catalog.cardinality(p_costs) <> v_n) THEN
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
    PERFORM lonnymq_check_list_v1('costs', pg_catalog.array_ndims(p_costs));
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
        OR coalesce(p_costs[u.ord], 1) NOT BETWEEN 1 AND 1000000
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
        ELSIF coalesce(p_costs[v_bad.ord], 1) NOT BETWEEN 1 AND 1000000 THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].cost', v_bad.ord - 1),
                'must be an integer from 1 to 1000000', p_costs[v_bad.ord]::text);
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
    PERFORM lonnymq_lock_channels_v1(v_channel_ids);
    PERFORM lonnymq_hold_channels_v1(v_channel_ids);
    -- Costs above 1 only: a queue that never uses costs pays nothing for the check.
    IF p_costs IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.unnest(p_costs) AS u(cost) WHERE u.cost > 1) THEN
        PERFORM lonnymq_check_costs_v1(
            p_queue,
            (SELECT pg_catalog.array_agg(f.id ORDER BY u.ord)
               FROM pg_catalog.unnest(p_channels) WITH ORDINALITY AS u(name, ord)
               JOIN ROWS FROM (pg_catalog.unnest(v_channel_ids), pg_catalog.unnest(v_channel_names)) AS f(id, name)
                 ON f.name = u.name),
            p_costs, true);
    END IF;

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
                       coalesce(u.on_duplicate, 'skip') AS on_duplicate, coalesce(p_costs[u.ord], 1) AS cost
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
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key, cost)
        SELECT r.new_id, r.channel_id, r.payload, r.dequeue_at, r.priority, r.max_attempts, r.dedup_key, r.cost
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
           k.ords, k.channels, k.keys, k.modes, k.new_ids, k.payloads, k.ats, k.priorities, k.attempts, k.costs
      INTO v_ids, v_row_channels, v_inserted_ids, v_wake_ids, v_wake_ats,
           v_k_ords, v_k_channels, v_k_keys, v_k_modes, v_k_new_ids, v_k_payloads, v_k_ats, v_k_priorities,
           v_k_attempts, v_k_costs
      FROM (SELECT pg_catalog.array_agg(k.ord ORDER BY k.channel_id, k.dedup_key, k.ord) AS ords,
                   pg_catalog.array_agg(k.channel_id ORDER BY k.channel_id, k.dedup_key, k.ord) AS channels,
                   pg_catalog.array_agg(k.dedup_key ORDER BY k.channel_id, k.dedup_key, k.ord) AS keys,
                   pg_catalog.array_agg(k.on_duplicate ORDER BY k.channel_id, k.dedup_key, k.ord) AS modes,
                   pg_catalog.array_agg(k.new_id ORDER BY k.channel_id, k.dedup_key, k.ord) AS new_ids,
                   pg_catalog.array_agg(k.payload ORDER BY k.channel_id, k.dedup_key, k.ord) AS payloads,
                   pg_catalog.array_agg(k.dequeue_at ORDER BY k.channel_id, k.dedup_key, k.ord) AS ats,
                   pg_catalog.array_agg(k.priority ORDER BY k.channel_id, k.dedup_key, k.ord) AS priorities,
                   pg_catalog.array_agg(k.max_attempts ORDER BY k.channel_id, k.dedup_key, k.ord) AS attempts,
                   pg_catalog.array_agg(k.cost ORDER BY k.channel_id, k.dedup_key, k.ord) AS costs
              FROM keyed k) k;

    -- A batch with modes: its keyed rows one at a time, in (channel, key, input) order, so
    -- the rows of one key apply in input order (as that many enqueues would) and concurrent
    -- batches take the keys' locks in one order. Each keeps the id drawn for it above.
    IF v_k_ords IS NOT NULL THEN
        FOR i IN 1 .. pg_catalog.cardinality(v_k_ords) LOOP
            SELECT k.id, k.wake_at INTO v_got
              FROM lonnymq_enqueue_keyed_v2(v_k_channels[i], v_k_keys[i], v_k_modes[i], v_k_new_ids[i],
                                            v_k_payloads[i], v_k_ats[i], v_k_priorities[i], v_k_attempts[i],
                                            v_k_costs[i]) k;
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

-- Lease up to p_batch_size messages of one queue, round robin across its channels.
-- Picks up to p_batch_size eligible channels (SKIP LOCKED), splits the batch fairly across
-- them (capped by free concurrency slots and rate limits: a release interval releases one,
-- a token bucket as many as it holds tokens), leases each picked channel's first ready
-- messages, and moves every picked channel to its next turn. A channel of weight w takes w
-- messages per round. Rows come back in round-robin order: the first round of each channel
-- in pick order, then the second, and so on. When every due channel is held by another
-- dequeuer, the call leases messages of those without limits without their rows
-- (lonnymq_dequeue_held_v1). A queue with a lonnymq_queue_config row releases no more than
-- its cap's free slots and its bucket's tokens allow, and nothing while it is paused.
CREATE OR REPLACE FUNCTION lonnymq_dequeue_v1(
    p_queue        text,
    p_batch_size   integer DEFAULT 1,
    p_lease_ms     bigint  DEFAULT 30000,
    p_worker       text    DEFAULT NULL,
    p_tolerance_ms bigint  DEFAULT 50,
    p_recheck_ms   bigint  DEFAULT 100
) RETURNS TABLE (
    id bigint, channel text, payload jsonb, attempts integer, max_attempts integer,
    priority smallint, dedup_key text, enqueued_at timestamptz, lease_token uuid, lease_until bigint
)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_now         bigint;
    v_token       uuid := pg_catalog.gen_random_uuid();
    v_turn_base   bigint;
    v_ch_ids      bigint[];
    v_ch_names    text[];
    v_quotas      integer[];
    v_limited     bigint[];
    v_weights     integer[];
    v_used        integer[];
    v_levels      bigint[];
    v_rounds_first bigint;
    v_weight_sum  bigint;
    v_rounds      bigint;
    v_n           integer;
    v_msg_ids     bigint[];
    v_msg_ords    bigint[];
    v_msg_rounds  bigint[];
    v_cut_owed    bigint[];
    v_next_ids    bigint[];
    v_next_at     bigint[];
    v_next_last   bigint[];
    v_next_leased integer[];
    v_next_token  bigint[];
    v_next_level  bigint[];
    v_owed        boolean[];
    v_rate_n      integer[];
    v_rate_period bigint[];
    v_lock_timeout text;
    v_intervals   bigint[];
    i             integer;
    v_head        bigint;
    v_floor       bigint;
    v_level       bigint;
    v_batch       integer;
    v_qc          lonnymq_queue_config%ROWTYPE;
    v_q_known     boolean := false;
    v_q_level     bigint;
    v_q_leased    integer;
    v_bursts      integer[];
    v_tokens      bigint[];
    v_msg_costs   bigint[];
    v_next_spent  bigint[];
    v_head_costs  integer[];
    v_keep        integer;
    v_q_spent     bigint;
    v_q_need      bigint := 1;
    v_need        bigint;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'dequeue needs READ COMMITTED, the session runs %', pg_catalog.current_setting('transaction_isolation')
            USING ERRCODE = 'LQ006';
    END IF;
    IF p_batch_size IS NULL OR p_batch_size NOT BETWEEN 1 AND 10000 THEN
        PERFORM lonnymq_raise_invalid_v1('batch_size', 'must be between 1 and 10000', p_batch_size::text);
    END IF;
    PERFORM lonnymq_check_range_v1('lease', p_lease_ms, 1::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_range_v1('recheck', p_recheck_ms, 0::bigint, 86400000::bigint, false);
    v_now := lonnymq_now_ms_v1();
    v_batch := p_batch_size;

    -- 1. Pick channels whose turn has come, in round-robin order; skip those another
    --    dequeuer holds. NO KEY UPDATE does not conflict with the KEY SHARE locks that
    --    producers' foreign-key checks hold on the channel row.
    --    SKIP LOCKED does not apply where PostgreSQL follows a channel row's update chain
    --    ("while locking updated version of tuple"): two dequeuers can then wait on each
    --    other until deadlock_timeout (1 s) kills one. A short lock timeout ends that wait
    --    after 20 ms; the call then serves the held channels, as when it finds none free.
    --    room: what the channel's limits let it release now. level: a token bucket's fill
    --    now (in token x period units; one release costs rate_period_ms of them), refilled
    --    at rate_count units per ms since the last release, up to rate_burst tokens.
    v_lock_timeout := pg_catalog.current_setting('lock_timeout');
    PERFORM pg_catalog.set_config('lock_timeout', '20ms', true);
    BEGIN
        -- 0. A queue-wide limit: lock the queue's row (the wait is bounded by the lock
        --    timeout), so concurrent dequeuers of the queue never admit more than it allows.
        --    Without a row this is one index probe. A paused queue releases nothing.
        SELECT * INTO v_qc FROM lonnymq_queue_config qc WHERE qc.queue = p_queue FOR NO KEY UPDATE;
        v_q_known := true;
        IF v_qc.queue IS NOT NULL THEN
            IF v_qc.paused THEN
                PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
                RETURN;
            END IF;
            IF v_qc.max_concurrency IS NOT NULL THEN
                v_batch := least(v_batch, greatest(v_qc.max_concurrency - v_qc.in_flight, 0));
            END IF;
            IF v_qc.rate_count IS NOT NULL THEN
                v_q_level := CASE WHEN v_qc.bucket_level IS NULL OR v_qc.last_release_at IS NULL
                                  THEN v_qc.rate_burst::bigint * v_qc.rate_period_ms
                                  ELSE least(v_qc.rate_burst::bigint * v_qc.rate_period_ms,
                                             v_qc.bucket_level + least(greatest(v_now - v_qc.last_release_at, 0::bigint),
                                                                       v_qc.rate_burst::bigint * v_qc.rate_period_ms)
                                                               * v_qc.rate_count::bigint) END;
                -- Never refill from a release "after" this call's clock reading.
                v_batch := CASE WHEN v_qc.last_release_at > v_now THEN 0
                                ELSE least(v_batch::bigint, v_q_level / v_qc.rate_period_ms)::integer END;
            END IF;
            IF v_batch < 1 THEN
                PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
                RETURN;
            END IF;
        END IF;
        -- Producers' committed wake-up marks lower their channels' next turn first.
        IF EXISTS (SELECT 1 FROM lonnymq_wake w WHERE w.queue = p_queue) THEN
            PERFORM lonnymq_apply_marks_v1(p_queue, p_tolerance_ms);
        END IF;
        -- The aggregates read the picked rows in the subquery's round-robin order (one sort;
        -- before PostgreSQL 16 every aggregate with its own ORDER BY sorts again).
        SELECT pg_catalog.array_agg(p.id),
               pg_catalog.array_agg(p.name),
               pg_catalog.array_agg(CASE WHEN p.level IS NULL THEN p.room
                                         ELSE least(p.room::bigint, p.level / p.rate_period_ms)::integer END),
               pg_catalog.array_agg(p.id) FILTER (WHERE p.max_concurrency IS NOT NULL),
               pg_catalog.array_agg(p.weight),
               pg_catalog.array_agg(p.round_used),
               pg_catalog.array_agg(p.level),
               pg_catalog.array_agg(p.rate_burst),
               pg_catalog.array_agg(p.level / p.rate_period_ms),
               pg_catalog.sum(p.weight - p.round_used), pg_catalog.sum(p.weight)
          INTO v_ch_ids, v_ch_names, v_quotas, v_limited, v_weights, v_used, v_levels, v_bursts, v_tokens,
               v_rounds_first, v_weight_sum
          FROM (
            SELECT c.id, c.name, c.next_dequeue_at, c.turn, c.max_concurrency, c.weight, c.round_used,
                   c.rate_period_ms, c.rate_burst,
                   -- NULL: no limit but the batch.
                   CASE WHEN c.release_interval_ms > 0 THEN 1
                        WHEN c.max_concurrency IS NOT NULL THEN c.max_concurrency - c.in_flight END AS room,
                   CASE WHEN c.rate_count IS NULL THEN NULL
                        WHEN c.bucket_level IS NULL OR c.last_dequeue_at IS NULL
                        THEN c.rate_burst::bigint * c.rate_period_ms
                        ELSE least(c.rate_burst::bigint * c.rate_period_ms,
                                   c.bucket_level + least(greatest(v_now - c.last_dequeue_at, 0::bigint),
                                                          c.rate_burst::bigint * c.rate_period_ms)
                                                    * c.rate_count::bigint) END AS level
              FROM lonnymq_channel c
             WHERE c.queue = p_queue
               AND c.next_dequeue_at <= v_now
               AND c.next_dequeue_at IS NOT NULL
               AND NOT c.paused
               AND (c.max_concurrency IS NULL OR c.in_flight < c.max_concurrency)
               -- A bucket refills from its last release: never from a release "after" now
               -- (another dequeuer's clock read a moment later).
               AND (c.rate_count IS NULL OR c.last_dequeue_at IS NULL OR c.last_dequeue_at <= v_now)
             ORDER BY c.next_dequeue_at, c.turn
             LIMIT v_batch
               FOR NO KEY UPDATE OF c SKIP LOCKED
          ) p;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        v_ch_ids := NULL;
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
    v_n := coalesce(pg_catalog.cardinality(v_ch_ids), 0);
    IF v_n = 0 AND (NOT v_q_known OR v_qc.queue IS NOT NULL) THEN
        -- A queue-wide limit (or a queue row this call could not read in time): no lease
        -- without the queue's count. Its dequeuers take the queue's row in turn, so they
        -- seldom find every channel held.
        RETURN;
    END IF;
    IF v_n = 0 THEN
        -- No due channel we could lock: the others' dequeuers hold them (or none is due).
        -- Those without limits are served without their rows.
        RETURN QUERY
            SELECT h.id, h.channel, h.payload, h.attempts, h.max_attempts, h.priority, h.dedup_key,
                   h.enqueued_at, h.lease_token, h.lease_until
              FROM lonnymq_dequeue_held_v1(p_queue, p_batch_size, v_now, p_lease_ms, p_worker, v_token) h;
        RETURN;
    END IF;

    -- 2. Candidate messages: each picked channel's first ready ones, in rounds: a channel of
    --    weight w takes w per round (fewer in the first round when it is part-way through
    --    one). Enough rounds for a full batch if every channel had a backlog (with weights
    --    1: ceil(batch / channels) each, as a plain round robin), capped by the room. Then
    --    the batch is cut in round-robin order (round, pick order, rank), the order the
    --    aggregates read the subquery in.
    --    A channel with a token bucket takes messages in order while their costs fit its
    --    tokens (tokens: level / rate_period_ms), each charged at most the bucket's burst, so
    --    a message that costs more than a smaller bucket holds goes once the bucket is full;
    --    a cheaper message never passes a dearer one. Without a bucket the costs are unread.
    v_rounds := pg_catalog.ceil(greatest(v_batch - v_rounds_first, 0)::numeric / v_weight_sum::numeric)::bigint;
    SELECT pg_catalog.array_agg(x.id), pg_catalog.array_agg(x.ord), pg_catalog.array_agg(x.rnd),
           pg_catalog.array_agg(x.cost)
      INTO v_msg_ids, v_msg_ords, v_msg_rounds, v_msg_costs
      FROM (
        SELECT m.id, m.rank, p.ord, (p.used + m.rank - 1) / p.weight AS rnd, m.cost
          FROM ROWS FROM (pg_catalog.unnest(v_ch_ids), pg_catalog.unnest(v_quotas),
                          pg_catalog.unnest(v_weights), pg_catalog.unnest(v_used),
                          pg_catalog.unnest(v_tokens), pg_catalog.unnest(v_bursts))
               WITH ORDINALITY AS p(channel_id, room, weight, used, tokens, burst, ord)
          CROSS JOIN LATERAL (
              SELECT r.id, r.rank, r.cost
                FROM (SELECT q.id, q.cost, pg_catalog.row_number() OVER w AS rank,
                             pg_catalog.sum(q.cost) OVER w AS spent
                        FROM (SELECT mm.id, mm.dequeue_at, least(mm.cost, coalesce(p.burst, mm.cost))::bigint AS cost
                                FROM lonnymq_message mm
                               WHERE mm.channel_id = p.channel_id
                                 AND mm.lease_until IS NULL
                                 AND mm.dequeue_at <= v_now
                               ORDER BY mm.dequeue_at, mm.id
                               LIMIT least(p.room::bigint, (p.weight - p.used)::bigint + v_rounds * p.weight::bigint,
                                           v_batch::bigint)
                                 FOR UPDATE OF mm SKIP LOCKED) q
                      WINDOW w AS (ORDER BY q.dequeue_at, q.id)) r
               WHERE p.tokens IS NULL OR r.spent <= p.tokens
          ) m
         ORDER BY 4, p.ord, m.rank
      ) x;
    -- Cut to the batch, and to what a queue-wide bucket's tokens pay for (in round-robin
    -- order, each message charged at most the queue's burst). The channels whose round the
    -- cut interrupted are owed the rest of it: they keep their place in the rotation (step 4).
    v_keep := least(coalesce(pg_catalog.cardinality(v_msg_ids), 0), v_batch);
    IF v_qc.rate_count IS NOT NULL AND v_keep > 0 THEN
        -- v_q_need: the tokens the first message left out needs (the queue's next token waits for them).
        SELECT pg_catalog.count(*) FILTER (WHERE s.spent <= v_q_level / v_qc.rate_period_ms),
               coalesce((pg_catalog.array_agg(s.cost ORDER BY s.pos)
                             FILTER (WHERE s.spent > v_q_level / v_qc.rate_period_ms))[1], 1)
          INTO v_keep, v_q_need
          FROM (SELECT least(u.cost, v_qc.rate_burst::bigint) AS cost, u.pos,
                       pg_catalog.sum(least(u.cost, v_qc.rate_burst::bigint)) OVER (ORDER BY u.pos) AS spent
                  FROM pg_catalog.unnest(v_msg_costs[1:v_keep]) WITH ORDINALITY AS u(cost, pos)) s;
        IF v_keep = 0 THEN
            -- Not one message fits the queue's tokens: its next token waits for the first one's cost.
            UPDATE lonnymq_queue_config qc
               SET next_token_at = v_now + (v_q_need * qc.rate_period_ms - v_q_level + qc.rate_count - 1) / qc.rate_count
             WHERE qc.queue = p_queue;
        END IF;
    END IF;
    IF coalesce(pg_catalog.cardinality(v_msg_ids), 0) > v_keep THEN
        SELECT pg_catalog.array_agg(DISTINCT o.ord) INTO v_cut_owed
          FROM ROWS FROM (pg_catalog.unnest(v_msg_ords), pg_catalog.unnest(v_msg_rounds)) WITH ORDINALITY AS o(ord, rnd, pos)
         WHERE o.pos > v_keep AND (v_keep = 0 OR o.rnd = v_msg_rounds[v_keep]);
        v_msg_ids := CASE WHEN v_keep > 0 THEN v_msg_ids[1:v_keep] END;
        v_msg_ords := CASE WHEN v_keep > 0 THEN v_msg_ords[1:v_keep] END;
        v_msg_costs := CASE WHEN v_keep > 0 THEN v_msg_costs[1:v_keep] END;
    END IF;

    -- 3. Lease them (matched by id array: a join here is planned as a full scan), and add
    --    them to the result, in batch order, from the rows the update wrote: reading them
    --    again afterwards cost a fifth of the call. RETURN QUERY does not end the call.
    IF v_msg_ids IS NOT NULL THEN
        RETURN QUERY
            WITH leased AS (
                UPDATE lonnymq_message m
                   SET lease_until = v_now + p_lease_ms,
                       lease_token = v_token,
                       leased_by = p_worker,
                       attempts = m.attempts + 1,
                       slot_taken = (v_limited IS NOT NULL AND m.channel_id = ANY (v_limited)),
                       queue_slot = (v_qc.max_concurrency IS NOT NULL)
                 WHERE m.id = ANY (v_msg_ids)
                RETURNING m.id, m.payload, m.attempts, m.max_attempts, m.priority, m.dedup_key, m.enqueued_at
            )
            SELECT l.id, v_ch_names[v_msg_ords[o.pos]], l.payload, l.attempts, l.max_attempts, l.priority,
                   l.dedup_key, l.enqueued_at, v_token, v_now + p_lease_ms
              FROM pg_catalog.unnest(v_msg_ids) WITH ORDINALITY AS o(id, pos)
              JOIN leased l ON l.id = o.id
             ORDER BY o.pos;
        -- The queue's counters, in the row this call has held since step 0.
        IF v_qc.queue IS NOT NULL THEN
            v_q_leased := pg_catalog.cardinality(v_msg_ids);
            SELECT pg_catalog.sum(least(u.cost, coalesce(v_qc.rate_burst, 1000000)::bigint)) INTO v_q_spent
              FROM pg_catalog.unnest(v_msg_costs) AS u(cost);
            v_q_level := v_q_level - v_q_spent * v_qc.rate_period_ms;
            UPDATE lonnymq_queue_config qc
               SET in_flight = qc.in_flight + CASE WHEN qc.max_concurrency IS NOT NULL THEN v_q_leased ELSE 0 END,
                   bucket_level = v_q_level,
                   last_release_at = v_now,
                   next_token_at = CASE WHEN v_q_level IS NULL THEN NULL
                                        WHEN v_q_level >= v_q_need * qc.rate_period_ms THEN v_now
                                        ELSE v_now + (v_q_need * qc.rate_period_ms - v_q_level + qc.rate_count - 1)
                                                     / qc.rate_count END
             WHERE qc.queue = p_queue;
        END IF;
    END IF;

    -- 4. Each picked channel's next turn: its next ready message, no earlier than now plus
    --    its release interval when it released something, nor before its bucket's next token.
    --    Leased per channel comes from step 2's pick ordinals: probing the message table
    --    with the id array once per channel cost 100 x 100 index probes per call.
    --    The aggregates read the rows in the subquery's pick order (one sort).
    SELECT pg_catalog.array_agg(n.channel_id), pg_catalog.array_agg(n.head), pg_catalog.array_agg(n.last_floor),
           pg_catalog.array_agg(n.leased), pg_catalog.array_agg(n.release_interval_ms),
           pg_catalog.array_agg(n.next_token_at), pg_catalog.array_agg(n.rate_count),
           pg_catalog.array_agg(n.rate_period_ms), pg_catalog.array_agg(n.spent), pg_catalog.array_agg(n.head_cost)
      INTO v_next_ids, v_next_at, v_next_last, v_next_leased, v_intervals, v_next_token, v_rate_n, v_rate_period,
           v_next_spent, v_head_costs
      FROM (
        SELECT p.channel_id, h.dequeue_at AS head, c.last_dequeue_at + c.release_interval_ms AS last_floor,
               coalesce(pg_catalog.cardinality(pg_catalog.array_positions(v_msg_ords, p.ord)), 0) AS leased,
               c.release_interval_ms, c.next_token_at, c.rate_count, c.rate_period_ms,
               -- The tokens its leases took (a bucket's channel only), and its next head's cost.
               CASE WHEN c.rate_count IS NOT NULL
                    THEN (SELECT coalesce(pg_catalog.sum(v_msg_costs[k.at]), 0)
                            FROM pg_catalog.unnest(pg_catalog.array_positions(v_msg_ords, p.ord)) AS k(at)) END AS spent,
               h.cost AS head_cost
          FROM pg_catalog.unnest(v_ch_ids) WITH ORDINALITY AS p(channel_id, ord)
          -- "= ANY" gives the planner an index path (a plain join to unnest() is planned as a
          -- hash join over a sequential scan of every channel).
          JOIN lonnymq_channel c ON c.id = p.channel_id AND c.id = ANY (v_ch_ids)
          LEFT JOIN LATERAL (
              SELECT mm.dequeue_at, mm.cost FROM lonnymq_message mm
               WHERE mm.channel_id = p.channel_id AND mm.lease_until IS NULL
               ORDER BY mm.dequeue_at, mm.id LIMIT 1
          ) h ON true
         ORDER BY p.ord
      ) n;
    v_owed := pg_catalog.array_fill(false, ARRAY[v_n]);
    v_next_level := v_levels;

    FOR i IN 1 .. v_n LOOP
        -- A token bucket that released: its fill after these releases. When it released, or
        -- when its tokens do not pay for its next head's cost, its next token is due when
        -- they do (the channel's next turn is no earlier): a message that costs 10 waits
        -- for 10 tokens, not 1.
        IF v_levels[i] IS NOT NULL THEN
            v_level := v_levels[i] - v_next_spent[i] * v_rate_period[i];
            v_need := least(coalesce(v_head_costs[i], 1), v_bursts[i])::bigint * v_rate_period[i];
            IF v_next_leased[i] > 0 OR v_level < v_need THEN
                v_next_level[i] := v_level;
                v_next_token[i] := CASE WHEN v_level >= v_need THEN v_now
                                        ELSE v_now + (v_need - v_level + v_rate_n[i] - 1) / v_rate_n[i] END;
            END IF;
        END IF;
        IF v_next_leased[i] > 0 THEN
            v_floor := v_now + v_intervals[i];
        ELSE
            v_floor := greatest(v_now, coalesce(v_next_last[i], v_now));
        END IF;
        v_floor := greatest(v_floor, v_next_token[i]);
        v_head := v_next_at[i];
        IF (v_cut_owed IS NOT NULL OR v_weight_sum > v_n) AND v_head <= v_now AND v_floor <= v_now
           AND (v_quotas[i] IS NULL OR v_next_leased[i] < v_quotas[i])
           AND ((v_next_leased[i] > 0 AND (v_used[i] + v_next_leased[i]) % v_weights[i] <> 0)
                OR i = ANY (v_cut_owed)) THEN
            -- Owed the rest of its round (weighted, or cut off by the batch): it keeps its
            -- place, so the next dequeue serves it first.
            v_owed[i] := true;
        ELSIF v_head IS NULL OR greatest(v_head, v_floor) > v_floor + p_tolerance_ms THEN
            -- Parking the channel, or moving it far ahead: only when no enqueue into it is
            -- in flight, and only after a second look with a snapshot taken after the lock.
            IF pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(v_next_ids[i]))
               AND pg_catalog.pg_try_advisory_xact_lock(lonnymq_stripe_lock_ns_v1(),
                                                        lonnymq_stripe_key_v1(v_next_ids[i])) THEN
                SELECT mm.dequeue_at INTO v_head FROM lonnymq_message mm
                 WHERE mm.channel_id = v_next_ids[i] AND mm.lease_until IS NULL
                 ORDER BY mm.dequeue_at, mm.id LIMIT 1;
                IF NOT FOUND THEN
                    v_head := NULL;
                END IF;
                v_next_at[i] := CASE WHEN v_head IS NULL THEN NULL ELSE greatest(v_head, v_floor) END;
            ELSE
                v_next_at[i] := least(coalesce(greatest(v_head, v_floor), v_now + p_recheck_ms), v_now + p_recheck_ms);
            END IF;
        ELSE
            v_next_at[i] := greatest(v_head, v_floor);
        END IF;
    END LOOP;

    -- 5. Write the picked channels. An owed channel keeps its turn and counts the releases
    --    of its round; every other one goes to the back and starts a new round.
    v_turn_base := pg_catalog.nextval('lonnymq_turn_seq') * 100000;
    UPDATE lonnymq_channel c
       SET next_dequeue_at = CASE WHEN u.owed THEN c.next_dequeue_at ELSE u.next_at END,
           turn = CASE WHEN u.owed THEN c.turn ELSE v_turn_base + u.ord END,
           round_used = CASE WHEN u.owed THEN (c.round_used + u.leased) % c.weight ELSE 0 END,
           last_dequeue_at = CASE WHEN u.leased > 0 THEN v_now ELSE c.last_dequeue_at END,
           released_total = c.released_total + u.leased,
           in_flight = c.in_flight + CASE WHEN c.max_concurrency IS NOT NULL THEN u.leased ELSE 0 END,
           bucket_level = CASE WHEN u.leased > 0 THEN u.level ELSE c.bucket_level END,
           next_token_at = u.token_at
      FROM ROWS FROM (pg_catalog.unnest(v_next_ids), pg_catalog.unnest(v_next_at), pg_catalog.unnest(v_next_leased),
                      pg_catalog.unnest(v_owed), pg_catalog.unnest(v_next_level), pg_catalog.unnest(v_next_token))
           WITH ORDINALITY AS u(channel_id, next_at, leased, owed, level, token_at, ord)
     WHERE c.id = u.channel_id AND c.id = ANY (v_next_ids);
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
                                          max_attempts, dedup_key, enqueued_at, reason, last_error, snoozes, cost)
        SELECT g.id, g.channel_id, c.queue, c.name, g.payload, g.priority, g.attempts, g.max_attempts,
               g.dedup_key, g.enqueued_at,
               CASE WHEN g.cancel_requested AND p_reason <> 'discarded' THEN 'cancelled' ELSE p_reason END,
               coalesce(p_error, g.last_error), g.snoozes, g.cost
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
                                     max_attempts, dedup_key, enqueued_at, last_error, snoozes, cost)
        VALUES (v_row.id, v_channel_id, v_row.payload, v_now, v_row.priority,
                CASE WHEN p_reset_attempts THEN 0 ELSE v_row.attempts END,
                CASE WHEN p_reset_attempts THEN v_row.max_attempts
                     ELSE greatest(v_row.max_attempts, v_row.attempts + 1) END,
                v_row.dedup_key, v_row.enqueued_at, v_row.last_error,
                CASE WHEN p_reset_attempts THEN 0 ELSE v_row.snoozes END, v_row.cost);
        DELETE FROM lonnymq_dead_message d WHERE d.id = v_row.id;
        IF lonnymq_wake_v1(v_channel_id, v_now, p_tolerance_ms) THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_row.queue);
        END IF;
        v_ids := v_ids OPERATOR(pg_catalog.||) v_row.id;
    END LOOP;
    RETURN v_ids;
END
$$;

-- A Django Task in one call (django_lonnymq.tasks): its message, then its result row, so an
-- enqueue outside a transaction is one statement and one round trip. The payload carries
-- the result's id, backend alias, task path, args and kwargs; the row copies them from it.
CREATE OR REPLACE FUNCTION lonnymq_enqueue_task_v1(
    p_queue            text,
    p_channel          text,
    p_payload          jsonb,
    p_run_at_ms        bigint,
    p_priority         integer,
    p_max_attempts     integer,
    p_run_after        timestamptz,
    p_enqueued_at      timestamptz,
    p_priority_step_ms bigint DEFAULT 1000,
    p_tolerance_ms     bigint DEFAULT 50
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_field text;
    v_id    bigint;
BEGIN
    IF p_payload IS NULL OR pg_catalog.jsonb_typeof(p_payload) IS DISTINCT FROM 'object' THEN
        PERFORM lonnymq_raise_invalid_v1('payload', 'must be a task message (a JSON object)', pg_catalog.left(p_payload::text, 100));
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

    v_id := lonnymq_enqueue_v3(p_queue, p_channel, p_payload, p_run_at_ms, NULL::bigint, p_priority, NULL::text,
                               'skip'::text, p_max_attempts, p_priority_step_ms, p_tolerance_ms, 1);
    INSERT INTO lonnymq_task_result (id, backend, task_path, queue, channel, message_id, status, args, kwargs,
                                     priority, run_after, enqueued_at)
    VALUES (p_payload OPERATOR(pg_catalog.->>) 'result_id'::text, p_payload OPERATOR(pg_catalog.->>) 'backend'::text,
            p_payload OPERATOR(pg_catalog.->>) 'task'::text, p_queue, p_channel, v_id, 'READY',
            p_payload OPERATOR(pg_catalog.->) 'args'::text, p_payload OPERATOR(pg_catalog.->) 'kwargs'::text,
            p_priority, p_run_after, p_enqueued_at);
    RETURN v_id;
END
$$;

-- A Django Task with a dedup key (django_lonnymq.tasks.dedup; docs/tasks.md): the rule of
-- lonnymq_enqueue_keyed_v2 for the key's message, and one result row per message. The
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

    -- "An enqueue into this channel is in flight": dequeuers will not park it meanwhile (its
    -- lock, or its stripe's past the transaction's 64th channel lock).
    PERFORM lonnymq_lock_channel_v1(v_channel_id);
    -- No prune or delete_channel deletes its row until this transaction ends: the hold of
    -- lonnymq_hold_channels_v1, written out (a call per enqueue costs more than the lock).
    PERFORM 1 FROM lonnymq_channel c WHERE c.id = v_channel_id FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM lonnymq_hold_channels_v1(ARRAY[v_channel_id]);  -- gone: raises ChannelGone
    END IF;
    v_new_id := pg_catalog.nextval('lonnymq_message_id_seq');

    IF p_on_duplicate <> 'skip' THEN
        -- The key's row, locked (lonnymq_enqueue_keyed_v2 then finds it held by this
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
      FROM lonnymq_enqueue_keyed_v2(v_channel_id, p_dedup_key, p_on_duplicate, v_new_id, v_payload,
                                    v_dequeue_at, p_priority, p_max_attempts, 1) k;
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

-- Enqueue the due ticks of one schedule and write its next tick, in the caller's transaction,
-- which claimed the row (named query claim_schedules: FOR UPDATE SKIP LOCKED). Each tick's
-- message runs at the tick and carries the dedup key 'lonnymq.periodic:<id>:<tick ms>', so
-- even a tick computed twice is enqueued once. Nothing happens (NULL) when the row is gone or
-- its next tick is no longer p_claimed_at (it was fired or edited meanwhile). p_error parks a
-- schedule whose timing cannot be computed: no tick, next_tick_at NULL, the error kept.
-- Returns the ids of the tick messages (existing ids where a tick was enqueued already).
CREATE OR REPLACE FUNCTION lonnymq_fire_schedule_v1(
    p_id                    bigint,
    p_claimed_at            bigint,
    p_ticks                 bigint[],
    p_next_tick_at          bigint,
    p_error                 text,
    p_default_max_attempts  integer,
    p_priority_step_ms      bigint,
    p_tolerance_ms          bigint
) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schedule lonnymq_schedule%ROWTYPE;
    v_tick     bigint;
    v_ids      bigint[] := '{}';
BEGIN
    PERFORM lonnymq_check_list_v1('ticks', pg_catalog.array_ndims(p_ticks));
    PERFORM lonnymq_check_range_v1('next_tick_at', p_next_tick_at, 0::bigint, 253402300799999::bigint, true);
    SELECT * INTO v_schedule FROM lonnymq_schedule s WHERE s.id = p_id FOR UPDATE;
    IF NOT FOUND OR v_schedule.next_tick_at IS DISTINCT FROM p_claimed_at THEN
        RETURN NULL;
    END IF;
    FOREACH v_tick IN ARRAY coalesce(p_ticks, '{}'::bigint[]) LOOP
        v_ids := pg_catalog.array_append(v_ids, lonnymq_enqueue_v3(
            v_schedule.queue, v_schedule.channel, v_schedule.payload, v_tick, NULL::bigint, 0,
            'lonnymq.periodic:' || v_schedule.id::text || ':' || v_tick::text, 'skip'::text,
            coalesce(v_schedule.max_attempts, p_default_max_attempts), p_priority_step_ms, p_tolerance_ms, 1));
    END LOOP;
    UPDATE lonnymq_schedule s
       SET next_tick_at = p_next_tick_at,
           last_tick_at = coalesce((SELECT pg_catalog.max(t) FROM pg_catalog.unnest(p_ticks) AS t), s.last_tick_at),
           last_message_id = coalesce(v_ids[pg_catalog.array_length(v_ids, 1)], s.last_message_id),
           last_error = p_error
     WHERE s.id = p_id;
    RETURN v_ids;
END
$$;

-- Publish events to a topic: each event becomes one message in every queue subscribed to it,
-- in the caller's transaction, through lonnymq_enqueue_many_v3 queue by queue in queue-name
-- order (so concurrent publishers take their locks in one order). An event's key names its
-- channel in each queue (NULL: 'default'); p_on_duplicate is each event's dedup mode. Returns
-- one row per subscribed queue, with the message ids in event order; no row when the topic
-- has no subscriber, whose events are counted in lonnymq_unrouted instead (their modes
-- checked all the same).
CREATE OR REPLACE FUNCTION lonnymq_publish_v2(
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
        ids := lonnymq_enqueue_many_v3(v_queue, v_channels, p_payloads, p_run_at_ms, NULL::bigint[],
                                       NULL::integer[], p_dedup_keys, p_on_duplicate, NULL::integer[],
                                       p_default_max_attempts, p_priority_step_ms, p_tolerance_ms, NULL::integer[]);
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

-- A step's message went to the dead-letter table (attempts spent, discarded, timed out,
-- cancelled, lease expired): the step is dead and its workflow fails (its descendants wait
-- for good); the first failure enqueues the workflow's on_failure message. Under a cancelled
-- workflow the step is cancelled instead. The trigger fires only for step messages.
CREATE OR REPLACE FUNCTION lonnymq_workflow_step_dead_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_workflow_id bigint;
    v_w record;
BEGIN
    SELECT s.workflow_id INTO v_workflow_id FROM lonnymq_workflow_step s
     WHERE s.id = NEW.id AND s.state = 'queued' FOR UPDATE;
    IF v_workflow_id IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT w.* INTO v_w FROM lonnymq_workflow w WHERE w.id = v_workflow_id FOR NO KEY UPDATE;
    IF v_w.state = 'cancelled' THEN
        UPDATE lonnymq_workflow_step s SET state = 'cancelled', finished_at = pg_catalog.now() WHERE s.id = NEW.id;
        RETURN NULL;
    END IF;
    UPDATE lonnymq_workflow_step s SET state = 'dead', finished_at = pg_catalog.now() WHERE s.id = NEW.id;
    UPDATE lonnymq_workflow w
       SET dead = w.dead + 1, state = 'failed', finished_at = coalesce(w.finished_at, pg_catalog.now())
     WHERE w.id = v_workflow_id;
    IF v_w.on_failure_queue IS NOT NULL AND v_w.on_failure_message_id IS NULL THEN
        UPDATE lonnymq_workflow w
           SET on_failure_message_id = lonnymq_enqueue_v3(
                   v_w.on_failure_queue, v_w.on_failure_channel, v_w.on_failure_payload, NULL::bigint,
                   NULL::bigint, 0, 'lonnymq.workflow_failed:' OPERATOR(pg_catalog.||) v_workflow_id::text,
                   'skip'::text, v_w.on_failure_max_attempts, 1000::bigint, 50::bigint, 1)
         WHERE w.id = v_workflow_id;
    END IF;
    RETURN NULL;
END
$$;
