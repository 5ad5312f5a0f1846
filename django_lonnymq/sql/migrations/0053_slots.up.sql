-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0053: enqueue(slots=k). A message's lease takes k units of its channel's
-- and its queue's concurrency caps (lonnymq_message.slots, kept by dead letters). A capped
-- channel is eligible while its next message's slots are free (lonnymq_channel.head_slots,
-- in the eligible index's predicate), a queue while the first message its last dequeue left
-- out fits (lonnymq_queue_config.head_slots). The enqueues that take slots are new versions
-- (lonnymq_enqueue_v4, _many_v4, _keyed_v3); the previous ones call them at one slot per
-- message; lonnymq_publish_v4 takes each event's slots (_v3 stays installed for the previous
-- release: superseded.sql). Giving slots back counts each lease's slots (lonnymq_give_back_slots_v2,
-- lonnymq_give_back_queue_slots_v2; the v1s stay installed for the previous release:
-- superseded.sql). Every other function that takes, gives back or counts slots is replaced
-- in place.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

ALTER TABLE lonnymq_message
    ADD COLUMN slots integer NOT NULL DEFAULT 1,
    ADD CONSTRAINT lonnymq_message_slots_range CHECK (slots BETWEEN 1 AND 1000000);
ALTER TABLE lonnymq_dead_message
    ADD COLUMN slots integer NOT NULL DEFAULT 1,
    ADD CONSTRAINT lonnymq_dead_message_slots_range CHECK (slots BETWEEN 1 AND 1000000);
ALTER TABLE lonnymq_channel
    ADD COLUMN head_slots integer NOT NULL DEFAULT 1,
    ADD CONSTRAINT lonnymq_channel_head_slots_range CHECK (head_slots BETWEEN 1 AND 1000000);
ALTER TABLE lonnymq_queue_config
    ADD COLUMN head_slots integer NOT NULL DEFAULT 1,
    ADD CONSTRAINT lonnymq_queue_config_head_slots_range CHECK (head_slots BETWEEN 1 AND 1000000);

-- The eligible index's predicate takes the next message's slots into account (the same
-- channels as before while every message takes one slot).
DROP INDEX lonnymq_channel_eligible_idx;
-- Invariant: a channel holding a ready message is in this index, or paused, or at its cap
-- (no room for the slots of its next message: head_slots).
CREATE INDEX lonnymq_channel_eligible_idx ON lonnymq_channel (queue, next_dequeue_at, turn)
    WHERE next_dequeue_at IS NOT NULL
      AND NOT paused
      AND (max_concurrency IS NULL OR in_flight + least(head_slots, max_concurrency) <= max_concurrency);

-- A message that asks more slots than its channel's (or its queue's) concurrency cap could
-- never run: refused (LQ001, field slots) before anything is written. Called only for slots
-- above 1, so a queue that never uses them pays nothing. A cap configured smaller later runs
-- such a message once the cap is all free (the dequeue counts it at most the cap).
CREATE FUNCTION lonnymq_check_slots_v1(p_queue text, p_channel_ids bigint[], p_slots integer[], p_batch boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_bad record;
BEGIN
    SELECT u.slots, u.ord, c.name, c.max_concurrency AS cap, 'channel' AS kind INTO v_bad
      FROM ROWS FROM (pg_catalog.unnest(p_channel_ids), pg_catalog.unnest(p_slots)) WITH ORDINALITY AS u(channel_id, slots, ord)
      JOIN lonnymq_channel c ON c.id = u.channel_id
     WHERE u.slots > 1 AND c.max_concurrency IS NOT NULL AND u.slots > c.max_concurrency
     ORDER BY u.ord
     LIMIT 1;
    IF NOT FOUND THEN
        SELECT u.slots, u.ord, p_queue AS name, qc.max_concurrency AS cap, 'queue' AS kind INTO v_bad
          FROM pg_catalog.unnest(p_slots) WITH ORDINALITY AS u(slots, ord)
          JOIN lonnymq_queue_config qc ON qc.queue = p_queue
         WHERE qc.max_concurrency IS NOT NULL AND u.slots > qc.max_concurrency
         ORDER BY u.ord
         LIMIT 1;
    END IF;
    IF v_bad.slots IS NOT NULL THEN
        PERFORM lonnymq_raise_invalid_v1(CASE WHEN p_batch THEN pg_catalog.format('items[%s].slots', v_bad.ord - 1)
                                              ELSE 'slots' END,
            pg_catalog.format('must be at most the max_concurrency of %s %s (%s): a message that takes more slots could never run',
                              v_bad.kind, pg_catalog.quote_literal(v_bad.name), v_bad.cap),
            v_bad.slots::text);
    END IF;
END
$$;

-- A keyed enqueue in mode 'replace' or 'update' (or 'skip', for a batch that mixes modes on
-- its keys): the one place that rule lives, for lonnymq_enqueue_v4 and
-- lonnymq_enqueue_many_v4 ('replace' takes the new cost and slots, 'update' keeps them). The caller has checked the row, holds the channel's shared
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
CREATE FUNCTION lonnymq_enqueue_keyed_v3(
    p_channel_id    bigint,
    p_dedup_key     text,
    p_on_duplicate  text,
    p_new_id        bigint,
    p_payload       jsonb,
    p_dequeue_at    bigint,
    p_priority      integer,
    p_max_attempts  integer,
    p_cost          integer,
    p_slots         integer,
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
            INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key, cost, slots)
            VALUES (p_new_id, p_channel_id, p_payload, p_dequeue_at, p_priority, p_max_attempts, p_dedup_key, p_cost,
                    p_slots);
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
                   max_attempts = p_max_attempts, cost = p_cost, slots = p_slots
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
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key, cost, slots)
        VALUES (p_new_id, p_channel_id, p_payload, p_dequeue_at, p_priority, p_max_attempts, p_dedup_key, p_cost, p_slots);
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
-- exists). p_slots: the units of the channel's and the queue's concurrency caps its lease
-- takes (1 to 1,000,000; more than a cap is refused while the cap exists). Returns the id of
-- the message the enqueue created or changed.
CREATE FUNCTION lonnymq_enqueue_v4(
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
    p_cost              integer DEFAULT 1,
    p_slots             integer DEFAULT 1
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
    IF p_slots IS NULL OR p_slots NOT BETWEEN 1 AND 1000000 THEN
        PERFORM lonnymq_raise_invalid_v1('slots', 'must be an integer from 1 to 1000000', coalesce(p_slots::text, 'null'));
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
    IF p_slots > 1 THEN
        PERFORM lonnymq_check_slots_v1(p_queue, ARRAY[v_channel_id], ARRAY[p_slots], false);
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
          FROM lonnymq_enqueue_keyed_v3(v_channel_id, p_dedup_key, p_on_duplicate,
                                        pg_catalog.nextval('lonnymq_message_id_seq'), p_payload,
                                        v_dequeue_at, p_priority, p_max_attempts, p_cost, p_slots) k;
        IF v_wake_at IS NOT NULL THEN
            PERFORM lonnymq_mark_v1(p_queue, v_channel_id, v_wake_at, p_tolerance_ms);
        END IF;
        RETURN v_id;
    END IF;

    INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key, cost, slots)
    VALUES (v_id, v_channel_id, p_payload, v_dequeue_at, p_priority, p_max_attempts, p_dedup_key, p_cost, p_slots);

    PERFORM lonnymq_mark_v1(p_queue, v_channel_id, v_dequeue_at, p_tolerance_ms);
    RETURN v_id;
END
$$;

-- Many messages of one queue, any channels, in one call. Returns the ids in input order (the
-- existing id where a dedup key repeats, also within the batch). NULL arrays mean "defaults
-- for every row". Channels are created in name order and locked in id order, and dedup keys
-- are claimed in (channel, key) order, so concurrent batches never deadlock, whatever their
-- row order. p_costs and p_slots: each row's cost and slots (NULL array or element: 1; see
-- lonnymq_enqueue_v4).
-- p_on_duplicate is each row's dedup mode ('skip', 'replace' or 'update'; a NULL
-- array or element: 'skip'). A batch whose rows all skip runs as one set-based statement
-- (lonnymq_enqueue_many_v1's, unchanged). A batch with a 'replace' or 'update' row
-- inserts its keyless rows in that statement and applies its keyed rows through
-- lonnymq_enqueue_keyed_v3 one at a time, in (channel, key, input) order, each with the id
-- drawn for it in input order: the rows of one key behave as that many enqueues in input
-- order would, and every row gets the id of the message its enqueue created or changed.
CREATE FUNCTION lonnymq_enqueue_many_v4(
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
    p_costs            integer[] DEFAULT NULL,
    p_slots            integer[] DEFAULT NULL
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
    v_k_slots        integer[];
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
       OR (p_costs IS NOT NULL AND pg_catalog.cardinality(p_costs) <> v_n)
       OR (p_slots IS NOT NULL AND pg_catalog.cardinality(p_slots) <> v_n) THEN
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
    PERFORM lonnymq_check_list_v1('slots', pg_catalog.array_ndims(p_slots));
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
        OR coalesce(p_slots[u.ord], 1) NOT BETWEEN 1 AND 1000000
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
        ELSIF coalesce(p_slots[v_bad.ord], 1) NOT BETWEEN 1 AND 1000000 THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].slots', v_bad.ord - 1),
                'must be an integer from 1 to 1000000', p_slots[v_bad.ord]::text);
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
    -- Slots above 1 only, likewise.
    IF p_slots IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.unnest(p_slots) AS u(slots) WHERE u.slots > 1) THEN
        PERFORM lonnymq_check_slots_v1(
            p_queue,
            (SELECT pg_catalog.array_agg(f.id ORDER BY u.ord)
               FROM pg_catalog.unnest(p_channels) WITH ORDINALITY AS u(name, ord)
               JOIN ROWS FROM (pg_catalog.unnest(v_channel_ids), pg_catalog.unnest(v_channel_names)) AS f(id, name)
                 ON f.name = u.name),
            p_slots, true);
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
                       coalesce(u.on_duplicate, 'skip') AS on_duplicate, coalesce(p_costs[u.ord], 1) AS cost,
                       coalesce(p_slots[u.ord], 1) AS slots
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
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key, cost, slots)
        SELECT r.new_id, r.channel_id, r.payload, r.dequeue_at, r.priority, r.max_attempts, r.dedup_key, r.cost, r.slots
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
           k.ords, k.channels, k.keys, k.modes, k.new_ids, k.payloads, k.ats, k.priorities, k.attempts, k.costs,
           k.slots
      INTO v_ids, v_row_channels, v_inserted_ids, v_wake_ids, v_wake_ats,
           v_k_ords, v_k_channels, v_k_keys, v_k_modes, v_k_new_ids, v_k_payloads, v_k_ats, v_k_priorities,
           v_k_attempts, v_k_costs, v_k_slots
      FROM (SELECT pg_catalog.array_agg(k.ord ORDER BY k.channel_id, k.dedup_key, k.ord) AS ords,
                   pg_catalog.array_agg(k.channel_id ORDER BY k.channel_id, k.dedup_key, k.ord) AS channels,
                   pg_catalog.array_agg(k.dedup_key ORDER BY k.channel_id, k.dedup_key, k.ord) AS keys,
                   pg_catalog.array_agg(k.on_duplicate ORDER BY k.channel_id, k.dedup_key, k.ord) AS modes,
                   pg_catalog.array_agg(k.new_id ORDER BY k.channel_id, k.dedup_key, k.ord) AS new_ids,
                   pg_catalog.array_agg(k.payload ORDER BY k.channel_id, k.dedup_key, k.ord) AS payloads,
                   pg_catalog.array_agg(k.dequeue_at ORDER BY k.channel_id, k.dedup_key, k.ord) AS ats,
                   pg_catalog.array_agg(k.priority ORDER BY k.channel_id, k.dedup_key, k.ord) AS priorities,
                   pg_catalog.array_agg(k.max_attempts ORDER BY k.channel_id, k.dedup_key, k.ord) AS attempts,
                   pg_catalog.array_agg(k.cost ORDER BY k.channel_id, k.dedup_key, k.ord) AS costs,
                   pg_catalog.array_agg(k.slots ORDER BY k.channel_id, k.dedup_key, k.ord) AS slots
              FROM keyed k) k;

    -- A batch with modes: its keyed rows one at a time, in (channel, key, input) order, so
    -- the rows of one key apply in input order (as that many enqueues would) and concurrent
    -- batches take the keys' locks in one order. Each keeps the id drawn for it above.
    IF v_k_ords IS NOT NULL THEN
        FOR i IN 1 .. pg_catalog.cardinality(v_k_ords) LOOP
            SELECT k.id, k.wake_at INTO v_got
              FROM lonnymq_enqueue_keyed_v3(v_k_channels[i], v_k_keys[i], v_k_modes[i], v_k_new_ids[i],
                                            v_k_payloads[i], v_k_ats[i], v_k_priorities[i], v_k_attempts[i],
                                            v_k_costs[i], v_k_slots[i]) k;
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

-- Give back the concurrency slots of leases that took one (p_channel_ids: each lease's
-- channel, p_slots: the slots it took), locking channels in id order. Notifies when a channel
-- that had no room for the slots of its next message (head_slots) has it again.
CREATE FUNCTION lonnymq_give_back_slots_v2(p_channel_ids bigint[], p_slots integer[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_row    record;
    v_queue  text;
    v_reopen boolean;
BEGIN
    FOR v_row IN
        SELECT u.channel_id, pg_catalog.sum(u.slots)::integer AS n
          FROM ROWS FROM (pg_catalog.unnest(p_channel_ids), pg_catalog.unnest(p_slots)) AS u(channel_id, slots)
         GROUP BY u.channel_id ORDER BY u.channel_id
    LOOP
        UPDATE lonnymq_channel c SET in_flight = greatest(c.in_flight - v_row.n, 0)
         WHERE c.id = v_row.channel_id
        RETURNING c.queue,
                  c.max_concurrency IS NOT NULL
                  AND c.in_flight + v_row.n + least(c.head_slots, c.max_concurrency) > c.max_concurrency
                  AND c.in_flight + least(c.head_slots, c.max_concurrency) <= c.max_concurrency
                  AND c.next_dequeue_at IS NOT NULL AND NOT c.paused
             INTO v_queue, v_reopen;
        IF v_reopen THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_queue);
        END IF;
    END LOOP;
END
$$;

-- Give back the queue-wide slots of leases that took one (p_channel_ids: the channel of each
-- such lease, p_slots: the slots it took), one queue row at a time in name order. Notifies
-- when a queue that had no room for its next message's slots has it again. Callers hold these
-- leases' message rows (and have given back their channel slots): queue rows are always the
-- last rows a call locks.
CREATE FUNCTION lonnymq_give_back_queue_slots_v2(p_channel_ids bigint[], p_slots integer[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_row    record;
    v_reopen boolean;
BEGIN
    FOR v_row IN
        SELECT c.queue, pg_catalog.sum(u.slots)::integer AS n
          FROM ROWS FROM (pg_catalog.unnest(p_channel_ids), pg_catalog.unnest(p_slots)) AS u(channel_id, slots)
          JOIN lonnymq_channel c ON c.id = u.channel_id AND c.id = ANY (p_channel_ids)
         GROUP BY c.queue ORDER BY c.queue
    LOOP
        UPDATE lonnymq_queue_config qc SET in_flight = greatest(qc.in_flight - v_row.n, 0)
         WHERE qc.queue = v_row.queue AND qc.max_concurrency IS NOT NULL
        RETURNING qc.in_flight + v_row.n + least(qc.head_slots, qc.max_concurrency) > qc.max_concurrency
                  AND qc.in_flight + least(qc.head_slots, qc.max_concurrency) <= qc.max_concurrency
             INTO v_reopen;
        IF v_reopen THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_row.queue);
        END IF;
    END LOOP;
END
$$;

-- Publish events to a topic: each event becomes one message in every queue subscribed to it,
-- in the caller's transaction, through lonnymq_enqueue_many_v4 queue by queue in queue-name
-- order (so concurrent publishers take their locks in one order). An event's key names its
-- channel in each queue (NULL: 'default'); p_on_duplicate is each event's dedup mode; p_costs
-- each event's cost in every queue (NULL array or element: 1; a cost past one queue's bucket
-- refuses the whole publish: lonnymq_check_costs_v1); p_slots each event's slots in every
-- queue (likewise; lonnymq_check_slots_v1). Returns one row per subscribed queue,
-- with the message ids in event order; no row when the topic has no subscriber, whose events
-- are counted in lonnymq_unrouted instead (their modes, costs and slots checked all the same).
CREATE FUNCTION lonnymq_publish_v4(
    p_topic                text,
    p_keys                 text[],
    p_payloads             jsonb[],
    p_run_at_ms            bigint[]  DEFAULT NULL,
    p_dedup_keys           text[]    DEFAULT NULL,
    p_on_duplicate         text[]    DEFAULT NULL,
    p_default_max_attempts integer   DEFAULT 5,
    p_priority_step_ms     bigint    DEFAULT 1000,
    p_tolerance_ms         bigint    DEFAULT 50,
    p_costs                integer[] DEFAULT NULL,
    p_slots                integer[] DEFAULT NULL
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
       OR (p_on_duplicate IS NOT NULL AND pg_catalog.cardinality(p_on_duplicate) <> v_n)
       OR (p_costs IS NOT NULL AND pg_catalog.cardinality(p_costs) <> v_n)
       OR (p_slots IS NOT NULL AND pg_catalog.cardinality(p_slots) <> v_n) THEN
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
        ids := lonnymq_enqueue_many_v4(v_queue, v_channels, p_payloads, p_run_at_ms, NULL::bigint[],
                                       NULL::integer[], p_dedup_keys, p_on_duplicate, NULL::integer[],
                                       p_default_max_attempts, p_priority_step_ms, p_tolerance_ms, p_costs,
                                       p_slots);
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
        PERFORM lonnymq_check_list_v1('costs', pg_catalog.array_ndims(p_costs));
        SELECT u.cost, u.ord INTO v_bad
          FROM pg_catalog.unnest(p_costs) WITH ORDINALITY AS u(cost, ord)
         WHERE coalesce(u.cost, 1) NOT BETWEEN 1 AND 1000000
         ORDER BY u.ord
         LIMIT 1;
        IF FOUND THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].cost', v_bad.ord - 1),
                'must be an integer from 1 to 1000000', v_bad.cost::text);
        END IF;
        PERFORM lonnymq_check_list_v1('slots', pg_catalog.array_ndims(p_slots));
        SELECT u.slots, u.ord INTO v_bad
          FROM pg_catalog.unnest(p_slots) WITH ORDINALITY AS u(slots, ord)
         WHERE coalesce(u.slots, 1) NOT BETWEEN 1 AND 1000000
         ORDER BY u.ord
         LIMIT 1;
        IF FOUND THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].slots', v_bad.ord - 1),
                'must be an integer from 1 to 1000000', v_bad.slots::text);
        END IF;
        INSERT INTO lonnymq_unrouted AS r (topic, events, last_published_at)
        VALUES (p_topic, v_n::bigint, pg_catalog.now())
        ON CONFLICT (topic) DO UPDATE
           SET events = r.events + EXCLUDED.events, last_published_at = EXCLUDED.last_published_at;
    END IF;
END
$$;

-- lonnymq_enqueue_keyed_v3 at one slot per message: the Task functions' keyed enqueue.
CREATE OR REPLACE FUNCTION lonnymq_enqueue_keyed_v2(
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
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT k.id, k.wake_at
      FROM lonnymq_enqueue_keyed_v3(p_channel_id, p_dedup_key, p_on_duplicate, p_new_id, p_payload, p_dequeue_at,
                                    p_priority, p_max_attempts, p_cost, 1) k
$$;

-- lonnymq_enqueue_v4 at one slot per message: the Task, schedule and workflow functions'
-- single enqueue.
CREATE OR REPLACE FUNCTION lonnymq_enqueue_v3(
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
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT lonnymq_enqueue_v4(p_queue, p_channel, p_payload, p_run_at_ms, p_delay_ms, p_priority, p_dedup_key,
                              p_on_duplicate, p_max_attempts, p_priority_step_ms, p_tolerance_ms, p_cost, 1)
$$;

-- Superseded by lonnymq_enqueue_many_v4 (migration 0053_slots).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- lonnymq_enqueue_many_v4 at one slot per message: what the previous release's enqueue_many
-- statement and lonnymq_publish_v3 call.
CREATE OR REPLACE FUNCTION lonnymq_enqueue_many_v3(
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
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT lonnymq_enqueue_many_v4(p_queue, p_channels, p_payloads, p_run_at_ms, p_delay_ms, p_priorities, p_dedup_keys,
                                   p_on_duplicate, p_max_attempts, p_default_max_attempts, p_priority_step_ms,
                                   p_tolerance_ms, p_costs, NULL::integer[])
$$;

-- A dequeue that found no due channel it could lock: every due channel is held by another
-- dequeuer (or waiting on one's row made lonnymq_dequeue_v1 give up). The due channels that
-- have no limit (no concurrency cap, no release interval, no token bucket, not paused) are
-- served anyway: their next ready messages are leased through SKIP LOCKED on the message
-- rows alone, without the channel row, so a busy channel has as many dequeuers at once as
-- there are workers. Nothing on such a channel's row depends on one release: its holder still moves
-- its turn (and parks it only after a look at its messages), and the count goes to
-- lonnymq_release_count. Round robin is not at stake: every due channel is being served at
-- this moment (docs/locking.md). The batch is split evenly across the channels in their
-- round-robin order (weights are not at stake either). Never waits.
CREATE OR REPLACE FUNCTION lonnymq_dequeue_held_v1(
    p_queue      text,
    p_batch_size integer,
    p_now        bigint,
    p_lease_ms   bigint,
    p_worker     text,
    p_token      uuid
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
    v_seen     bigint[];
    v_ch_ids   bigint[];
    v_ch_names text[];
    v_msg_ids  bigint[];
    v_msg_ords bigint[];
    v_share    integer;
BEGIN
    -- Due channels without limits, in round-robin order, read without a lock: due by their
    -- turn, or by a committed wake-up mark that another dequeuer is applying right now.
    SELECT pg_catalog.array_agg(d.id ORDER BY d.at, d.turn) INTO v_seen
      FROM (SELECT DISTINCT ON (x.id) x.id, x.at, x.turn
              FROM ((SELECT c.id, c.next_dequeue_at AS at, c.turn FROM lonnymq_channel c
                      WHERE c.queue = p_queue
                        AND c.next_dequeue_at <= p_now
                        AND c.next_dequeue_at IS NOT NULL
                        AND NOT c.paused
                        AND (c.max_concurrency IS NULL OR c.in_flight + least(c.head_slots, c.max_concurrency) <= c.max_concurrency)
                        AND c.max_concurrency IS NULL
                        AND c.release_interval_ms = 0
                        AND c.rate_count IS NULL
                      ORDER BY c.next_dequeue_at, c.turn
                      LIMIT p_batch_size)
                    UNION ALL
                    (SELECT c.id, m.dequeue_at AS at, c.turn
                       FROM lonnymq_marks_due_v1(p_queue, p_now, p_batch_size) m
                       JOIN lonnymq_channel c ON c.id = m.channel_id
                      WHERE NOT c.paused
                        AND c.max_concurrency IS NULL
                        AND c.release_interval_ms = 0
                        AND c.rate_count IS NULL)) x
             ORDER BY x.id, x.at) d;
    IF v_seen IS NULL THEN
        RETURN;
    END IF;
    -- Say that leases without the row are being taken (a change of the channel's limits
    -- waits for this transaction), then read the limits again in a new statement, whose
    -- snapshot is taken after the lock: a limit set meanwhile is seen, or its change waits.
    -- (Only the limits: a channel's turn says nothing a ready message does not, when it has
    -- no limit.)
    SELECT pg_catalog.array_agg(u.id ORDER BY u.ord) INTO v_seen
      FROM pg_catalog.unnest(v_seen) WITH ORDINALITY AS u(id, ord)
     WHERE pg_catalog.pg_try_advisory_xact_lock_shared(lonnymq_lease_lock_ns_v1(), lonnymq_lock_key_v1(u.id));
    SELECT pg_catalog.array_agg(u.id ORDER BY u.ord), pg_catalog.array_agg(c.name ORDER BY u.ord)
      INTO v_ch_ids, v_ch_names
      FROM pg_catalog.unnest(v_seen) WITH ORDINALITY AS u(id, ord)
      JOIN lonnymq_channel c ON c.id = u.id AND c.id = ANY (v_seen)
     WHERE NOT c.paused
       AND c.max_concurrency IS NULL
       AND c.release_interval_ms = 0
       AND c.rate_count IS NULL;
    IF v_ch_ids IS NULL THEN
        RETURN;
    END IF;
    v_share := pg_catalog.ceil(p_batch_size::numeric / pg_catalog.cardinality(v_ch_ids)::numeric)::integer;

    SELECT pg_catalog.array_agg(x.id ORDER BY x.rank, x.ord), pg_catalog.array_agg(x.ord ORDER BY x.rank, x.ord)
      INTO v_msg_ids, v_msg_ords
      FROM (
        SELECT m.id, m.rank, p.ord
          FROM pg_catalog.unnest(v_ch_ids) WITH ORDINALITY AS p(channel_id, ord)
          CROSS JOIN LATERAL (
              SELECT q.id, pg_catalog.row_number() OVER (ORDER BY q.dequeue_at, q.id) AS rank
                FROM (SELECT mm.id, mm.dequeue_at
                        FROM lonnymq_message mm
                       WHERE mm.channel_id = p.channel_id
                         AND mm.lease_until IS NULL
                         AND mm.dequeue_at <= p_now
                       ORDER BY mm.dequeue_at, mm.id
                       LIMIT v_share
                         FOR UPDATE OF mm SKIP LOCKED) q
          ) m
         ORDER BY m.rank, p.ord
         LIMIT p_batch_size
      ) x;
    IF v_msg_ids IS NULL THEN
        RETURN;
    END IF;

    -- Lease them, count them on this backend's own rows (no other running transaction
    -- writes those, so the upsert never waits), and return them in batch order from the
    -- rows the update wrote.
    RETURN QUERY
        WITH leased AS (
            UPDATE lonnymq_message m
               SET lease_until = p_now + p_lease_ms,
                   lease_token = p_token,
                   leased_by = p_worker,
                   attempts = m.attempts + 1,
                   slot_taken = false
             WHERE m.id = ANY (v_msg_ids)
            RETURNING m.id, m.channel_id, m.payload, m.attempts, m.max_attempts, m.priority, m.dedup_key,
                      m.enqueued_at
        ), counted AS (
            INSERT INTO lonnymq_release_count AS r (channel_id, backend, released)
            SELECT l.channel_id, pg_catalog.pg_backend_pid(), pg_catalog.count(*)
              FROM leased l GROUP BY l.channel_id
            ON CONFLICT (channel_id, backend) DO UPDATE SET released = r.released + excluded.released
        )
        SELECT l.id, v_ch_names[v_msg_ords[o.pos]], l.payload, l.attempts, l.max_attempts, l.priority,
               l.dedup_key, l.enqueued_at, p_token, p_now + p_lease_ms
          FROM pg_catalog.unnest(v_msg_ids) WITH ORDINALITY AS o(id, pos)
          JOIN leased l ON l.id = o.id
         ORDER BY o.pos;
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
    v_holds       bigint[];
    v_buckets     boolean;
    v_caps        integer[];
    v_slot_rooms  integer[];
    v_msg_slots   integer[];
    v_next_slots  integer[];
    v_head_slots  integer[];
    v_q_keep      integer;
    v_q_slot_need integer := 1;
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
               pg_catalog.array_agg(p.level / p.rate_period_ms), pg_catalog.bool_or(p.level IS NOT NULL),
               pg_catalog.sum(p.weight - p.round_used), pg_catalog.sum(p.weight),
               pg_catalog.array_agg(p.max_concurrency), pg_catalog.array_agg(p.max_concurrency - p.in_flight)
          INTO v_ch_ids, v_ch_names, v_quotas, v_limited, v_weights, v_used, v_levels, v_bursts, v_tokens, v_buckets,
               v_rounds_first, v_weight_sum, v_caps, v_slot_rooms
          FROM (
            SELECT c.id, c.name, c.next_dequeue_at, c.turn, c.max_concurrency, c.in_flight, c.weight, c.round_used,
                   c.rate_period_ms, c.rate_burst,
                   -- NULL: no limit but the batch. An ordered channel held for a retry or a
                   -- dead message releases nothing (its next turn waits for hold_until).
                   CASE WHEN c.hold_until > v_now THEN 0
                        WHEN c.release_interval_ms > 0 THEN 1
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
               AND (c.max_concurrency IS NULL OR c.in_flight + least(c.head_slots, c.max_concurrency) <= c.max_concurrency)
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
    v_rounds := pg_catalog.ceil(greatest(v_batch - v_rounds_first, 0)::numeric / v_weight_sum::numeric)::bigint;
    --    A channel with a token bucket takes messages in order while their costs fit its
    --    tokens (tokens: level / rate_period_ms), each charged at most the bucket's burst, so
    --    a message that costs more than a smaller bucket holds goes once the bucket is full;
    --    a cheaper message never passes a dearer one. When neither the queue nor any channel
    --    picked has a bucket, costs are not read at all: the plain query below.
    --    A capped channel takes messages in order while their slots fit its free ones (each
    --    counted at most its cap, so a message that asks more than a smaller cap runs once
    --    the cap is free); a message that asks fewer never passes one that asks more. The plain
    --    query reads each candidate's slots and the cut by slots follows it, only when one
    --    asks more than one slot.
    IF v_buckets OR v_qc.rate_count IS NOT NULL THEN
        SELECT pg_catalog.array_agg(x.id), pg_catalog.array_agg(x.ord), pg_catalog.array_agg(x.rnd),
               pg_catalog.array_agg(x.cost), pg_catalog.array_agg(x.slots)
          INTO v_msg_ids, v_msg_ords, v_msg_rounds, v_msg_costs, v_msg_slots
          FROM (
            SELECT m.id, m.rank, p.ord, (p.used + m.rank - 1) / p.weight AS rnd, m.cost, m.slots
              FROM ROWS FROM (pg_catalog.unnest(v_ch_ids), pg_catalog.unnest(v_quotas),
                              pg_catalog.unnest(v_weights), pg_catalog.unnest(v_used),
                              pg_catalog.unnest(v_tokens), pg_catalog.unnest(v_bursts),
                              pg_catalog.unnest(v_caps), pg_catalog.unnest(v_slot_rooms))
                   WITH ORDINALITY AS p(channel_id, room, weight, used, tokens, burst, cap, slot_room, ord)
              CROSS JOIN LATERAL (
                  SELECT r.id, r.rank, r.cost, r.slots
                    FROM (SELECT q.id, q.cost, q.slots, pg_catalog.row_number() OVER w AS rank,
                                 pg_catalog.sum(q.cost) OVER w AS spent,
                                 pg_catalog.sum(least(q.slots, p.cap)) OVER w AS taken
                            FROM (SELECT mm.id, mm.dequeue_at, least(mm.cost, coalesce(p.burst, mm.cost))::bigint AS cost,
                                         mm.slots
                                    FROM lonnymq_message mm
                                   WHERE mm.channel_id = p.channel_id
                                     AND mm.lease_until IS NULL
                                     AND mm.dequeue_at <= v_now
                                   ORDER BY mm.dequeue_at, mm.id
                                   LIMIT least(p.room::bigint, (p.weight - p.used)::bigint + v_rounds * p.weight::bigint,
                                               v_batch::bigint)
                                     FOR UPDATE OF mm SKIP LOCKED) q
                          WINDOW w AS (ORDER BY q.dequeue_at, q.id)) r
                   WHERE (p.tokens IS NULL OR r.spent <= p.tokens) AND (p.cap IS NULL OR r.taken <= p.slot_room)
              ) m
             ORDER BY 4, p.ord, m.rank
          ) x;
    ELSE
        SELECT pg_catalog.array_agg(x.id), pg_catalog.array_agg(x.ord), pg_catalog.array_agg(x.rnd),
               pg_catalog.array_agg(x.slots)
          INTO v_msg_ids, v_msg_ords, v_msg_rounds, v_msg_slots
          FROM (
            SELECT m.id, m.rank, p.ord, (p.used + m.rank - 1) / p.weight AS rnd, m.slots
              FROM ROWS FROM (pg_catalog.unnest(v_ch_ids), pg_catalog.unnest(v_quotas),
                              pg_catalog.unnest(v_weights), pg_catalog.unnest(v_used))
                   WITH ORDINALITY AS p(channel_id, room, weight, used, ord)
              CROSS JOIN LATERAL (
                  SELECT q.id, q.slots, pg_catalog.row_number() OVER (ORDER BY q.dequeue_at, q.id) AS rank
                    FROM (SELECT mm.id, mm.dequeue_at, mm.slots
                            FROM lonnymq_message mm
                           WHERE mm.channel_id = p.channel_id
                             AND mm.lease_until IS NULL
                             AND mm.dequeue_at <= v_now
                           ORDER BY mm.dequeue_at, mm.id
                           LIMIT least(p.room::bigint, (p.weight - p.used)::bigint + v_rounds * p.weight::bigint,
                                       v_batch::bigint)
                             FOR UPDATE OF mm SKIP LOCKED) q
              ) m
             ORDER BY 4, p.ord, m.rank
          ) x;
        IF v_limited IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.unnest(v_msg_slots) AS u(n) WHERE u.n > 1) THEN
            -- Each capped channel keeps its candidates while their slots fit (in rank order).
            SELECT pg_catalog.array_agg(k.id ORDER BY k.pos), pg_catalog.array_agg(k.ord ORDER BY k.pos),
                   pg_catalog.array_agg(k.rnd ORDER BY k.pos), pg_catalog.array_agg(k.slots ORDER BY k.pos)
              INTO v_msg_ids, v_msg_ords, v_msg_rounds, v_msg_slots
              FROM (SELECT u.id, u.ord, u.rnd, u.slots, u.pos,
                           pg_catalog.sum(least(u.slots, v_caps[u.ord::integer])) OVER (PARTITION BY u.ord ORDER BY u.pos) AS taken
                      FROM ROWS FROM (pg_catalog.unnest(v_msg_ids), pg_catalog.unnest(v_msg_ords),
                                      pg_catalog.unnest(v_msg_rounds), pg_catalog.unnest(v_msg_slots))
                           WITH ORDINALITY AS u(id, ord, rnd, slots, pos)) k
             WHERE v_caps[k.ord::integer] IS NULL OR k.taken <= v_slot_rooms[k.ord::integer];
        END IF;
    END IF;
    -- Cut to the batch, and to what a queue-wide bucket's tokens pay for (in round-robin
    -- order, each message charged at most the queue's burst). The channels whose round the
    -- cut interrupted are owed the rest of it: they keep their place in the rotation (step 4).
    v_keep := least(coalesce(pg_catalog.cardinality(v_msg_ids), 0), v_batch);
    -- A queue-wide cap: what its free slots hold, in round-robin order (each message counted
    -- at most the cap). v_q_slot_need: the slots the first message left out asks (the queue
    -- waits for them: lonnymq_next_due_v1); 1 when none was left out for want of slots.
    IF v_qc.max_concurrency IS NOT NULL AND v_keep > 0 THEN
        SELECT pg_catalog.count(*) FILTER (WHERE s.taken <= v_qc.max_concurrency - v_qc.in_flight),
               coalesce((pg_catalog.array_agg(s.slots ORDER BY s.pos)
                             FILTER (WHERE s.taken > v_qc.max_concurrency - v_qc.in_flight))[1], 1)
          INTO v_q_keep, v_q_slot_need
          FROM (SELECT least(u.slots, v_qc.max_concurrency) AS slots, u.pos,
                       pg_catalog.sum(least(u.slots, v_qc.max_concurrency)) OVER (ORDER BY u.pos) AS taken
                  FROM pg_catalog.unnest(v_msg_slots[1:v_keep]) WITH ORDINALITY AS u(slots, pos)) s;
        v_keep := v_q_keep;
        IF v_keep = 0 AND v_q_slot_need <> v_qc.head_slots THEN
            -- Nothing leased (step 3 writes the queue's row otherwise).
            UPDATE lonnymq_queue_config qc SET head_slots = v_q_slot_need WHERE qc.queue = p_queue;
        END IF;
    END IF;
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
        v_msg_slots := CASE WHEN v_keep > 0 THEN v_msg_slots[1:v_keep] END;
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
            SELECT pg_catalog.sum(u.slots) INTO v_q_leased FROM pg_catalog.unnest(v_msg_slots) AS u(slots);
            SELECT pg_catalog.sum(least(u.cost, coalesce(v_qc.rate_burst, 1000000)::bigint)) INTO v_q_spent
              FROM pg_catalog.unnest(v_msg_costs) AS u(cost);
            v_q_level := v_q_level - v_q_spent * v_qc.rate_period_ms;
            UPDATE lonnymq_queue_config qc
               SET in_flight = qc.in_flight + CASE WHEN qc.max_concurrency IS NOT NULL THEN v_q_leased ELSE 0 END,
                   head_slots = v_q_slot_need,
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
           pg_catalog.array_agg(n.rate_period_ms), pg_catalog.array_agg(n.spent), pg_catalog.array_agg(n.head_cost),
           pg_catalog.array_agg(n.hold_until), pg_catalog.array_agg(n.slots_taken), pg_catalog.array_agg(n.head_slots)
      INTO v_next_ids, v_next_at, v_next_last, v_next_leased, v_intervals, v_next_token, v_rate_n, v_rate_period,
           v_next_spent, v_head_costs, v_holds, v_next_slots, v_head_slots
      FROM (
        SELECT p.channel_id, h.dequeue_at AS head, c.last_dequeue_at + c.release_interval_ms AS last_floor,
               coalesce(pg_catalog.cardinality(pg_catalog.array_positions(v_msg_ords, p.ord)), 0) AS leased,
               c.release_interval_ms, c.next_token_at, c.rate_count, c.rate_period_ms,
               -- The tokens its leases took (a bucket's channel only), and its next head's cost.
               CASE WHEN c.rate_count IS NOT NULL
                    THEN (SELECT coalesce(pg_catalog.sum(v_msg_costs[k.at]), 0)
                            FROM pg_catalog.unnest(pg_catalog.array_positions(v_msg_ords, p.ord)) AS k(at)) END AS spent,
               h.cost AS head_cost, c.hold_until,
               -- The slots its leases took (a capped channel only), and its next head's.
               CASE WHEN c.max_concurrency IS NOT NULL
                    THEN (SELECT coalesce(pg_catalog.sum(v_msg_slots[k.at]), 0)
                            FROM pg_catalog.unnest(pg_catalog.array_positions(v_msg_ords, p.ord)) AS k(at)) ELSE 0 END
                   AS slots_taken,
               coalesce(h.slots, 1) AS head_slots
          FROM pg_catalog.unnest(v_ch_ids) WITH ORDINALITY AS p(channel_id, ord)
          -- "= ANY" gives the planner an index path (a plain join to unnest() is planned as a
          -- hash join over a sequential scan of every channel).
          JOIN lonnymq_channel c ON c.id = p.channel_id AND c.id = ANY (v_ch_ids)
          LEFT JOIN LATERAL (
              SELECT mm.dequeue_at, mm.cost, mm.slots FROM lonnymq_message mm
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
        v_floor := greatest(v_floor, v_next_token[i], v_holds[i]);
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
           in_flight = c.in_flight + u.slots_taken,
           head_slots = u.head_slots,
           bucket_level = CASE WHEN u.leased > 0 THEN u.level ELSE c.bucket_level END,
           next_token_at = u.token_at
      FROM ROWS FROM (pg_catalog.unnest(v_next_ids), pg_catalog.unnest(v_next_at), pg_catalog.unnest(v_next_leased),
                      pg_catalog.unnest(v_owed), pg_catalog.unnest(v_next_level), pg_catalog.unnest(v_next_token),
                      pg_catalog.unnest(v_next_slots), pg_catalog.unnest(v_head_slots))
           WITH ORDINALITY AS u(channel_id, next_at, leased, owed, level, token_at, slots_taken, head_slots, ord)
     WHERE c.id = u.channel_id AND c.id = ANY (v_next_ids);
END
$$;

-- The earliest time any eligible channel of these queues may release (NULL: none queued).
-- Idle workers sleep until then, or until a notification wakes them. A queue at its
-- queue-wide cap has no such time (an ack that gives a slot back notifies), nor has a paused
-- queue (resuming notifies); a queue-wide bucket's next token comes first.
CREATE OR REPLACE FUNCTION lonnymq_next_due_v1(p_queues text[]) RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT pg_catalog.min(greatest(x.at, qc.next_token_at)) FROM pg_catalog.unnest(p_queues) AS q(name)
    LEFT JOIN lonnymq_queue_config qc ON qc.queue = q.name
    CROSS JOIN LATERAL (
        (SELECT c.next_dequeue_at AS at FROM lonnymq_channel c
          WHERE c.queue = q.name
            AND c.next_dequeue_at IS NOT NULL
            AND NOT c.paused
            AND (c.max_concurrency IS NULL OR c.in_flight + least(c.head_slots, c.max_concurrency) <= c.max_concurrency)
          ORDER BY c.next_dequeue_at LIMIT 1)
        UNION ALL
        -- A producer's committed mark: the next dequeue applies it.
        (SELECT w.dequeue_at FROM lonnymq_wake w WHERE w.queue = q.name ORDER BY w.dequeue_at LIMIT 1)
    ) x
    WHERE (qc.max_concurrency IS NULL OR qc.in_flight + least(qc.head_slots, qc.max_concurrency) <= qc.max_concurrency)
      AND qc.paused IS NOT TRUE
$$;

-- Acknowledge processed messages: delete them. Returns the ids acked; an id missing from the
-- result had a stale token (its lease expired and was taken over) or no longer exists.
CREATE OR REPLACE FUNCTION lonnymq_ack_v1(p_ids bigint[], p_tokens uuid[]) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_acked bigint[];
    v_slots bigint[];
    v_slot_counts integer[];
    v_queue_slots bigint[];
    v_queue_slot_counts integer[];
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_list_v1('tokens', pg_catalog.array_ndims(p_tokens));
    IF coalesce(pg_catalog.cardinality(p_ids), 0) <> coalesce(pg_catalog.cardinality(p_tokens), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('tokens', 'must have one token per id', pg_catalog.cardinality(p_tokens)::text);
    END IF;
    WITH gone AS (
        DELETE FROM lonnymq_message m
         WHERE m.id = ANY (p_ids)
           AND (m.id, m.lease_token) IN (SELECT u.id, u.token FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_tokens)) AS u(id, token))
        RETURNING m.id, m.channel_id, m.slot_taken, m.queue_slot, m.slots
    )
    SELECT coalesce(pg_catalog.array_agg(g.id), ARRAY[]::bigint[]), pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.slot_taken),
           pg_catalog.array_agg(g.slots) FILTER (WHERE g.slot_taken),
           pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.queue_slot), pg_catalog.array_agg(g.slots) FILTER (WHERE g.queue_slot)
      INTO v_acked, v_slots, v_slot_counts, v_queue_slots, v_queue_slot_counts FROM gone g;
    IF v_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_slots_v2(v_slots, v_slot_counts);
    END IF;
    IF v_queue_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_queue_slots_v2(v_queue_slots, v_queue_slot_counts);
    END IF;
    RETURN v_acked;
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
    v_slot_counts integer[];
    v_queue_slots bigint[];
    v_queue_slot_counts integer[];
    v_n integer;
    v_channels bigint[];
    v_dead bigint[];
BEGIN
    WITH gone AS (
        DELETE FROM lonnymq_message m WHERE m.id = ANY (p_ids)
        RETURNING m.*
    ), dead AS (
        INSERT INTO lonnymq_dead_message (id, channel_id, queue, channel, payload, priority, attempts,
                                          max_attempts, dedup_key, enqueued_at, reason, last_error, snoozes, cost,
                                          slots)
        SELECT g.id, g.channel_id, c.queue, c.name, g.payload, g.priority, g.attempts, g.max_attempts,
               g.dedup_key, g.enqueued_at,
               CASE WHEN g.cancel_requested AND p_reason <> 'discarded' THEN 'cancelled' ELSE p_reason END,
               coalesce(p_error, g.last_error), g.snoozes, g.cost, g.slots
          FROM gone g JOIN lonnymq_channel c ON c.id = g.channel_id
        RETURNING 1
    )
    SELECT pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.slot_taken), pg_catalog.array_agg(g.slots) FILTER (WHERE g.slot_taken),
           pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.queue_slot), pg_catalog.array_agg(g.slots) FILTER (WHERE g.queue_slot),
           (SELECT pg_catalog.count(*) FROM dead),
           pg_catalog.array_agg(g.channel_id ORDER BY g.id), pg_catalog.array_agg(g.id ORDER BY g.id)
      INTO v_slots, v_slot_counts, v_queue_slots, v_queue_slot_counts, v_n, v_channels, v_dead FROM gone g;
    -- Strict order: a dead message blocks its ordered channel (the first one to die names
    -- it) until it is requeued or skipped. The channel rows are locked in id order first.
    IF EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.id = ANY (v_channels) AND c.ordered) THEN
        PERFORM 1 FROM lonnymq_channel c WHERE c.id = ANY (v_channels) ORDER BY c.id FOR NO KEY UPDATE;
        UPDATE lonnymq_channel c
           SET hold_until = 253402300799999, blocked_by = coalesce(c.blocked_by, b.id)
          FROM (SELECT u.channel_id, pg_catalog.min(u.id) AS id
                  FROM ROWS FROM (pg_catalog.unnest(v_channels), pg_catalog.unnest(v_dead)) AS u(channel_id, id)
                 GROUP BY u.channel_id) b
         WHERE c.id = b.channel_id AND c.id = ANY (v_channels) AND c.ordered;
    END IF;
    IF v_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_slots_v2(v_slots, v_slot_counts);
    END IF;
    IF v_queue_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_queue_slots_v2(v_queue_slots, v_queue_slot_counts);
    END IF;
    RETURN coalesce(v_n, 0);
END
$$;

-- Put locked, leased messages back as ready at their new dequeue_at, give their slots back
-- and wake their channels (taking each channel's shared advisory lock, like an enqueue).
-- A message someone asked to cancel is buried as 'cancelled' instead: it never runs again.
-- A message of an ordered channel keeps its place (its dequeue_at) and holds its channel
-- until the new time instead (hold_until), so nothing after it runs meanwhile.
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
    v_slot_counts integer[];
    v_queue_slots bigint[];
    v_queue_slot_counts integer[];
    v_cancelled bigint[];
    v_ch        record;
    v_ordered   bigint[];
BEGIN
    -- Lock every channel row this call may touch, in id order, before touching any: giving
    -- slots back and waking channels must not take them in two different orders.
    SELECT pg_catalog.array_agg(l.id) FILTER (WHERE l.ordered) INTO v_ordered
      FROM (SELECT c.id, c.ordered FROM lonnymq_channel c
             WHERE c.id IN (SELECT m.channel_id FROM lonnymq_message m WHERE m.id = ANY (p_ids))
             ORDER BY c.id FOR NO KEY UPDATE) l;
    SELECT pg_catalog.array_agg(m.id) INTO v_cancelled
      FROM lonnymq_message m WHERE m.id = ANY (p_ids) AND m.cancel_requested;
    IF v_cancelled IS NOT NULL THEN
        PERFORM lonnymq_bury_v1(v_cancelled, 'cancelled', p_error);
    END IF;
    SELECT pg_catalog.array_agg(m.channel_id) FILTER (WHERE m.slot_taken), pg_catalog.array_agg(m.slots) FILTER (WHERE m.slot_taken),
           pg_catalog.array_agg(m.channel_id) FILTER (WHERE m.queue_slot), pg_catalog.array_agg(m.slots) FILTER (WHERE m.queue_slot)
      INTO v_slots, v_slot_counts, v_queue_slots, v_queue_slot_counts
      FROM lonnymq_message m WHERE m.id = ANY (p_ids);
    IF v_ordered IS NOT NULL THEN
        -- Strict order: the channel waits until the latest new time of its messages here
        -- (a release's own time, which is past, holds nothing), and they keep their place.
        UPDATE lonnymq_channel c
           SET hold_until = CASE WHEN h.until > lonnymq_now_ms_v1() THEN h.until END
          FROM (SELECT m.channel_id, pg_catalog.max(u.dequeue_at) AS until
                  FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_dequeue_ats)) AS u(id, dequeue_at)
                  JOIN lonnymq_message m ON m.id = u.id AND m.id = ANY (p_ids)
                 WHERE m.channel_id = ANY (v_ordered) AND m.lease_until IS NOT NULL
                 GROUP BY m.channel_id) h
         WHERE c.id = h.channel_id AND c.blocked_by IS NULL;
    END IF;
    UPDATE lonnymq_message m
       SET lease_until = NULL, lease_token = NULL, leased_by = NULL, slot_taken = false, queue_slot = false,
           dequeue_at = CASE WHEN v_ordered IS NOT NULL AND m.channel_id = ANY (v_ordered)
                             THEN least(m.dequeue_at, u.dequeue_at) ELSE u.dequeue_at END,
           attempts = CASE WHEN p_uncount THEN greatest(m.attempts - 1, 0) ELSE m.attempts END,
           last_error = coalesce(p_error, m.last_error)
      FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_dequeue_ats)) AS u(id, dequeue_at)
     WHERE m.id = ANY (p_ids) AND m.id = u.id;
    IF v_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_slots_v2(v_slots, v_slot_counts);
    END IF;
    FOR v_ch IN
        SELECT m.channel_id, greatest(pg_catalog.min(m.dequeue_at), pg_catalog.max(c.hold_until)) AS dequeue_at,
               pg_catalog.min(c.queue) AS queue
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
        PERFORM lonnymq_give_back_queue_slots_v2(v_queue_slots, v_queue_slot_counts);
    END IF;
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
    v_at bigint;
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
        -- Ready now; in an ordered channel, back at the head (no later than its first waiting
        -- message: the tie goes to the lower id, this one's), and a channel it blocked is free.
        v_at := v_now;
        IF EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.id = v_channel_id AND c.ordered) THEN
            SELECT least(v_now, coalesce(pg_catalog.min(h.dequeue_at), v_now)) INTO v_at
              FROM (SELECT mm.dequeue_at FROM lonnymq_message mm
                     WHERE mm.channel_id = v_channel_id AND mm.lease_until IS NULL
                     ORDER BY mm.dequeue_at, mm.id LIMIT 1) h;
            UPDATE lonnymq_channel c SET hold_until = NULL, blocked_by = NULL
             WHERE c.id = v_channel_id AND c.blocked_by = v_row.id;
        END IF;
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, attempts,
                                     max_attempts, dedup_key, enqueued_at, last_error, snoozes, cost, slots)
        VALUES (v_row.id, v_channel_id, v_row.payload, v_at, v_row.priority,
                CASE WHEN p_reset_attempts THEN 0 ELSE v_row.attempts END,
                CASE WHEN p_reset_attempts THEN v_row.max_attempts
                     ELSE greatest(v_row.max_attempts, v_row.attempts + 1) END,
                v_row.dedup_key, v_row.enqueued_at, v_row.last_error,
                CASE WHEN p_reset_attempts THEN 0 ELSE v_row.snoozes END, v_row.cost, v_row.slots);
        DELETE FROM lonnymq_dead_message d WHERE d.id = v_row.id;
        IF lonnymq_wake_v1(v_channel_id, v_at, p_tolerance_ms) THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_row.queue);
        END IF;
        v_ids := v_ids OPERATOR(pg_catalog.||) v_row.id;
    END LOOP;
    RETURN v_ids;
END
$$;

-- Create a channel or change the limits given: a NULL argument leaves that limit as it is
-- (p_unlimited removes the concurrency cap, p_no_rate the token bucket). A rate is given
-- whole (count, period and burst). The channel row is locked before its limits are read,
-- so an edit of one limit never overwrites a concurrent change of another.
-- Setting a limit on a channel that had none starts counting the leases already running, so
-- the limit holds at once. Their message rows are claimed with SKIP LOCKED after the channel
-- row is locked: a message locked right now is being acked, failed or reaped, i.e. leaving
-- flight, and waiting on it could deadlock with an ack (message row, then channel row).
-- A new or changed rate starts with a full bucket; a new weight starts a new round.
CREATE OR REPLACE FUNCTION lonnymq_configure_channel_v3(
    p_queue text, p_channel text, p_max_concurrency integer DEFAULT NULL, p_unlimited boolean DEFAULT false,
    p_release_interval_ms bigint DEFAULT NULL, p_paused boolean DEFAULT NULL, p_weight integer DEFAULT NULL,
    p_rate_count integer DEFAULT NULL, p_rate_period_ms bigint DEFAULT NULL, p_rate_burst integer DEFAULT NULL,
    p_no_rate boolean DEFAULT false
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id       bigint;
    v_head     bigint;
    v_old      lonnymq_channel%ROWTYPE;
    v_counted  integer := 0;
    v_max      integer;
    v_interval bigint;
    v_new_rate boolean;
BEGIN
    IF p_max_concurrency IS NOT NULL AND p_max_concurrency < 1 THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'must be positive or null (unlimited)', p_max_concurrency::text);
    END IF;
    IF p_max_concurrency IS NOT NULL AND coalesce(p_unlimited, false) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'cannot be combined with unlimited', p_max_concurrency::text);
    END IF;
    PERFORM lonnymq_check_range_v1('release_interval_ms', p_release_interval_ms, 0::bigint, 31622400000::bigint, true);
    PERFORM lonnymq_check_range_v1('weight', p_weight::bigint, 1::bigint, 1000::bigint, true);
    v_new_rate := p_rate_count IS NOT NULL OR p_rate_period_ms IS NOT NULL OR p_rate_burst IS NOT NULL;
    IF v_new_rate THEN
        IF coalesce(p_no_rate, false) THEN
            PERFORM lonnymq_raise_invalid_v1('rate', 'cannot be combined with no_rate', p_rate_count::text);
        END IF;
        PERFORM lonnymq_check_range_v1('rate_count', p_rate_count::bigint, 1::bigint, 1000000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_period_ms', p_rate_period_ms, 1::bigint, 31622400000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_burst', p_rate_burst::bigint, 1::bigint, 1000000::bigint, false);
    END IF;
    PERFORM lonnymq_check_names_v1(p_queue, p_channel);
    v_id := lonnymq_channel_id_v1(p_queue, p_channel);
    SELECT * INTO v_old FROM lonnymq_channel c WHERE c.id = v_id FOR NO KEY UPDATE;
    -- Dequeues that lease this channel's messages without its row (lonnymq_dequeue_held_v1)
    -- hold this lock shared and read the limits after taking it: wait for those running, so
    -- the leases counted below include theirs and later ones see the new limits.
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_lease_lock_ns_v1(), lonnymq_lock_key_v1(v_id));
    v_max := CASE WHEN coalesce(p_unlimited, false) THEN NULL
                  ELSE coalesce(p_max_concurrency, v_old.max_concurrency) END;
    v_interval := coalesce(p_release_interval_ms, v_old.release_interval_ms);
    IF v_old.max_concurrency IS NULL AND v_max IS NOT NULL THEN
        WITH claimed AS (
            UPDATE lonnymq_message m SET slot_taken = true
             WHERE m.id IN (SELECT mm.id FROM lonnymq_message mm
                             WHERE mm.lease_until IS NOT NULL AND mm.channel_id = v_id AND NOT mm.slot_taken
                               FOR UPDATE SKIP LOCKED)
            RETURNING m.slots
        )
        SELECT coalesce(pg_catalog.sum(cl.slots), 0) INTO v_counted FROM claimed cl;
    END IF;
    SELECT mm.dequeue_at INTO v_head FROM lonnymq_message mm
     WHERE mm.channel_id = v_id AND mm.lease_until IS NULL ORDER BY mm.dequeue_at, mm.id LIMIT 1;
    UPDATE lonnymq_channel c
       SET max_concurrency = v_max,
           release_interval_ms = v_interval,
           paused = coalesce(p_paused, c.paused),
           in_flight = c.in_flight + v_counted,
           weight = coalesce(p_weight, c.weight),
           round_used = CASE WHEN p_weight IS NULL OR p_weight = c.weight THEN c.round_used ELSE 0 END,
           rate_count = CASE WHEN v_new_rate THEN p_rate_count WHEN p_no_rate THEN NULL ELSE c.rate_count END,
           rate_period_ms = CASE WHEN v_new_rate THEN p_rate_period_ms WHEN p_no_rate THEN NULL ELSE c.rate_period_ms END,
           rate_burst = CASE WHEN v_new_rate THEN p_rate_burst WHEN p_no_rate THEN NULL ELSE c.rate_burst END,
           bucket_level = CASE WHEN v_new_rate OR p_no_rate THEN NULL ELSE c.bucket_level END,
           next_token_at = CASE WHEN v_new_rate OR p_no_rate THEN NULL ELSE c.next_token_at END,
           next_dequeue_at = CASE WHEN v_head IS NULL THEN c.next_dequeue_at
                                  ELSE least(coalesce(c.next_dequeue_at, v_head),
                                             greatest(v_head, c.last_dequeue_at + v_interval,
                                                      CASE WHEN v_new_rate OR p_no_rate THEN NULL
                                                           ELSE c.next_token_at END)) END
     WHERE c.id = v_id;
    PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    RETURN v_id;
END
$$;

-- Create or change a plan: a NULL limit is left as it is (a new plan starts from the
-- defaults: weight 1, no cap, no interval, no rate, not ordered); p_unlimited removes the cap,
-- p_no_rate the bucket. p_ordered: strict order for the plan's channels (NULL: as it is); an
-- ordered plan's cap is 1 (p_ordered true without a cap sets it, another cap is refused:
-- LQ001 max_concurrency, and lonnymq_plan_ordered_one_at_a_time). Every channel that follows the plan takes the new values of the limits it does
-- not set itself, in one statement (no loop over channels), with what
-- lonnymq_configure_channel_v3 does to one channel:
-- - a channel that gets a cap where it had none counts its leases already running. Before
--   that, the ready messages of those channels are locked: a dequeue leasing them without
--   the channel's row (lonnymq_dequeue_held_v1, which serves only channels without limits)
--   is waited for, and none can start until this commits (it skips locked messages), so no
--   lease escapes the count;
-- - the channel rows are locked in id order (the order acks give slots back in), then
--   written; a new weight starts a new round, a new or changed rate a full bucket, and a
--   shorter interval or a bucket removed may bring the next turn earlier;
-- - with lonnymq_order_channel_v1's meaning, each channel that does not set its order itself
--   (own_ordered) becomes ordered with the plan, or stops being ordered (its hold or block
--   lifted at once, its next turn brought back to its head) in the same row write as its cap.
--   Refused (LQ001) before any channel is written: ordering a channel whose own cap is not 1
--   (field ordered), a cap other than 1 for an ordered channel that follows the plan's cap
--   (field max_concurrency).
-- The plan's row is locked first (channel creation and configure_channel read it FOR SHARE,
-- before the channel's row). Returns how many channels changed.
CREATE OR REPLACE FUNCTION lonnymq_configure_plan_v2(
    p_name text, p_weight integer DEFAULT NULL, p_max_concurrency integer DEFAULT NULL,
    p_unlimited boolean DEFAULT false, p_release_interval_ms bigint DEFAULT NULL,
    p_rate_count integer DEFAULT NULL, p_rate_period_ms bigint DEFAULT NULL, p_rate_burst integer DEFAULT NULL,
    p_no_rate boolean DEFAULT false, p_ordered boolean DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
-- Compiling the rewrite of every channel cost more than a third of it (JIT on a large count).
SET jit = off
AS $$
DECLARE
    v_plan         lonnymq_plan%ROWTYPE;
    v_new_rate     boolean;
    v_claim_ids    bigint[];
    v_claim_counts integer[];
    v_queues       text[];
    v_changed      integer;
    v_old_cap      integer;
    v_was_ordered  boolean;
    v_clash        record;
BEGIN
    PERFORM lonnymq_check_plan_name_v1(p_name);
    IF p_max_concurrency IS NOT NULL AND p_max_concurrency < 1 THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'must be positive or null (unlimited)', p_max_concurrency::text);
    END IF;
    IF p_max_concurrency IS NOT NULL AND coalesce(p_unlimited, false) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'cannot be combined with unlimited', p_max_concurrency::text);
    END IF;
    IF p_ordered AND (coalesce(p_unlimited, false) OR p_max_concurrency <> 1) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'must be 1 for an ordered plan',
                                         coalesce(p_max_concurrency::text, 'null'));
    END IF;
    PERFORM lonnymq_check_range_v1('release_interval_ms', p_release_interval_ms, 0::bigint, 31622400000::bigint, true);
    PERFORM lonnymq_check_range_v1('weight', p_weight::bigint, 1::bigint, 1000::bigint, true);
    v_new_rate := p_rate_count IS NOT NULL OR p_rate_period_ms IS NOT NULL OR p_rate_burst IS NOT NULL;
    IF v_new_rate THEN
        IF coalesce(p_no_rate, false) THEN
            PERFORM lonnymq_raise_invalid_v1('rate', 'cannot be combined with no_rate', p_rate_count::text);
        END IF;
        PERFORM lonnymq_check_range_v1('rate_count', p_rate_count::bigint, 1::bigint, 1000000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_period_ms', p_rate_period_ms, 1::bigint, 31622400000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_burst', p_rate_burst::bigint, 1::bigint, 1000000::bigint, false);
    END IF;

    INSERT INTO lonnymq_plan (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING;
    SELECT * INTO v_plan FROM lonnymq_plan p WHERE p.name = p_name FOR NO KEY UPDATE;
    v_old_cap := v_plan.max_concurrency;
    v_was_ordered := v_plan.ordered;
    IF p_ordered IS NULL AND v_plan.ordered AND (coalesce(p_unlimited, false) OR p_max_concurrency <> 1) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency',
                                         'must stay 1 while the plan is ordered (configure_plan(ordered=False) first)',
                                         coalesce(p_max_concurrency::text, 'null'));
    END IF;
    UPDATE lonnymq_plan p
       SET weight = coalesce(p_weight, p.weight),
           max_concurrency = CASE WHEN coalesce(p_unlimited, false) THEN NULL
                                  WHEN p_ordered AND p_max_concurrency IS NULL THEN 1
                                  ELSE coalesce(p_max_concurrency, p.max_concurrency) END,
           ordered = coalesce(p_ordered, p.ordered),
           release_interval_ms = coalesce(p_release_interval_ms, p.release_interval_ms),
           rate_count = CASE WHEN v_new_rate THEN p_rate_count WHEN p_no_rate THEN NULL ELSE p.rate_count END,
           rate_period_ms = CASE WHEN v_new_rate THEN p_rate_period_ms WHEN p_no_rate THEN NULL ELSE p.rate_period_ms END,
           rate_burst = CASE WHEN v_new_rate THEN p_rate_burst WHEN p_no_rate THEN NULL ELSE p.rate_burst END,
           updated_at = pg_catalog.now()
     WHERE p.id = v_plan.id
    RETURNING p.* INTO v_plan;

    IF v_plan.max_concurrency IS NOT NULL THEN
        -- Channels getting a cap: no lease without their rows until this commits.
        PERFORM 1 FROM lonnymq_message m
         WHERE m.channel_id IN (SELECT c.id FROM lonnymq_channel c
                                 WHERE c.plan_id = v_plan.id AND NOT c.own_max_concurrency
                                   AND c.max_concurrency IS NULL)
           AND m.lease_until IS NULL
         ORDER BY m.id
           FOR UPDATE OF m;
    END IF;
    PERFORM 1 FROM lonnymq_channel c WHERE c.plan_id = v_plan.id ORDER BY c.id FOR NO KEY UPDATE OF c;
    -- Strict order and a cap other than 1 never meet on a channel (the channel's CHECK): say
    -- which channel stands in the way, and how to move it, before writing any.
    IF v_plan.ordered AND NOT v_was_ordered THEN
        SELECT c.queue, c.name, c.max_concurrency INTO v_clash FROM lonnymq_channel c
         WHERE c.plan_id = v_plan.id AND NOT c.own_ordered AND c.own_max_concurrency
           AND c.max_concurrency IS DISTINCT FROM 1
         ORDER BY c.id LIMIT 1;
        IF FOUND THEN
            PERFORM lonnymq_raise_invalid_v1('ordered', pg_catalog.format(
                'cannot order channel %s of queue %s, whose own max_concurrency is %s (let its cap follow the plan, '
                'or keep it unordered: configure_channel(..., ordered=False))',
                pg_catalog.quote_literal(v_clash.name), pg_catalog.quote_literal(v_clash.queue),
                coalesce(v_clash.max_concurrency::text, 'null')), 'true');
        END IF;
    END IF;
    IF v_plan.max_concurrency IS DISTINCT FROM 1 AND v_old_cap IS NOT DISTINCT FROM 1 THEN
        SELECT c.queue, c.name INTO v_clash FROM lonnymq_channel c
         WHERE c.plan_id = v_plan.id AND c.own_ordered AND c.ordered AND NOT c.own_max_concurrency
         ORDER BY c.id LIMIT 1;
        IF FOUND THEN
            PERFORM lonnymq_raise_invalid_v1('max_concurrency', pg_catalog.format(
                'must stay 1: channel %s of queue %s is ordered and follows the plan''s cap (give it its own '
                'cap of 1 first: configure_channel(..., max_concurrency=1))',
                pg_catalog.quote_literal(v_clash.name), pg_catalog.quote_literal(v_clash.queue)),
                coalesce(v_plan.max_concurrency::text, 'null'));
        END IF;
    END IF;
    IF v_plan.max_concurrency IS NOT NULL THEN
        -- A new statement: it sees the leases of the dequeuers the row locks waited for. A
        -- locked lease is being acked, failed or reaped (leaving flight): skipped, as in
        -- lonnymq_configure_channel_v3.
        WITH claimed AS (
            UPDATE lonnymq_message m SET slot_taken = true
             WHERE m.id IN (SELECT mm.id FROM lonnymq_message mm
                             WHERE mm.channel_id IN (SELECT c.id FROM lonnymq_channel c
                                                      WHERE c.plan_id = v_plan.id AND NOT c.own_max_concurrency
                                                        AND c.max_concurrency IS NULL)
                               AND mm.lease_until IS NOT NULL AND NOT mm.slot_taken
                               FOR UPDATE SKIP LOCKED)
            RETURNING m.channel_id, m.slots
        )
        SELECT pg_catalog.array_agg(x.channel_id), pg_catalog.array_agg(x.n)
          INTO v_claim_ids, v_claim_counts
          FROM (SELECT cl.channel_id, pg_catalog.sum(cl.slots)::integer AS n FROM claimed cl GROUP BY cl.channel_id) x;
    END IF;

    WITH target AS (
        SELECT c.id,
               CASE WHEN c.own_weight THEN c.weight ELSE v_plan.weight END AS weight,
               CASE WHEN c.own_max_concurrency THEN c.max_concurrency ELSE v_plan.max_concurrency END
                   AS max_concurrency,
               CASE WHEN c.own_release_interval THEN c.release_interval_ms ELSE v_plan.release_interval_ms END
                   AS release_interval_ms,
               CASE WHEN c.own_rate THEN c.rate_count ELSE v_plan.rate_count END AS rate_count,
               CASE WHEN c.own_rate THEN c.rate_period_ms ELSE v_plan.rate_period_ms END AS rate_period_ms,
               CASE WHEN c.own_rate THEN c.rate_burst ELSE v_plan.rate_burst END AS rate_burst,
               CASE WHEN c.own_ordered THEN c.ordered ELSE v_plan.ordered END AS ordered,
               c.ordered AS old_ordered, c.hold_until AS old_hold_until,
               c.weight AS old_weight, c.max_concurrency AS old_max_concurrency,
               c.release_interval_ms AS old_release_interval_ms, c.rate_count AS old_rate_count,
               c.rate_period_ms AS old_rate_period_ms, c.rate_burst AS old_rate_burst
          FROM lonnymq_channel c
         WHERE c.plan_id = v_plan.id
    ), changed AS (
        SELECT t.*, coalesce(cl.n, 0) AS claimed,
               (t.rate_count, t.rate_period_ms, t.rate_burst)
                   IS DISTINCT FROM (t.old_rate_count, t.old_rate_period_ms, t.old_rate_burst) AS new_rate,
               h.dequeue_at AS head
          FROM target t
          LEFT JOIN ROWS FROM (pg_catalog.unnest(v_claim_ids), pg_catalog.unnest(v_claim_counts)) AS cl(channel_id, n)
            ON cl.channel_id = t.id
          -- The head only where the next turn may come earlier: a shorter interval, a rate
          -- changed or removed, a hold lifted (a cap or a weight does not move it).
          LEFT JOIN LATERAL (
              SELECT mm.dequeue_at FROM lonnymq_message mm
               WHERE mm.channel_id = t.id AND mm.lease_until IS NULL
                 AND (t.release_interval_ms < t.old_release_interval_ms
                      OR (t.old_hold_until IS NOT NULL AND NOT t.ordered)
                      OR (t.rate_count, t.rate_period_ms, t.rate_burst)
                         IS DISTINCT FROM (t.old_rate_count, t.old_rate_period_ms, t.old_rate_burst))
               ORDER BY mm.dequeue_at, mm.id LIMIT 1
          ) h ON true
         WHERE (t.weight, t.max_concurrency, t.release_interval_ms, t.rate_count, t.rate_period_ms, t.rate_burst)
               IS DISTINCT FROM (t.old_weight, t.old_max_concurrency, t.old_release_interval_ms, t.old_rate_count,
                                 t.old_rate_period_ms, t.old_rate_burst)
            OR t.ordered IS DISTINCT FROM t.old_ordered
            OR cl.n IS NOT NULL
    ), written AS (
        UPDATE lonnymq_channel c
           SET weight = x.weight,
               round_used = CASE WHEN x.weight = c.weight THEN c.round_used ELSE 0 END,
               max_concurrency = x.max_concurrency,
               in_flight = c.in_flight + x.claimed,
               release_interval_ms = x.release_interval_ms,
               rate_count = x.rate_count,
               rate_period_ms = x.rate_period_ms,
               rate_burst = x.rate_burst,
               ordered = x.ordered,
               hold_until = CASE WHEN x.ordered THEN c.hold_until END,
               blocked_by = CASE WHEN x.ordered THEN c.blocked_by END,
               bucket_level = CASE WHEN x.new_rate THEN NULL ELSE c.bucket_level END,
               next_token_at = CASE WHEN x.new_rate THEN NULL ELSE c.next_token_at END,
               next_dequeue_at = CASE WHEN x.head IS NULL THEN c.next_dequeue_at
                                      ELSE least(coalesce(c.next_dequeue_at, x.head),
                                                 greatest(x.head, c.last_dequeue_at + x.release_interval_ms,
                                                          CASE WHEN x.new_rate THEN NULL
                                                               ELSE c.next_token_at END)) END
          FROM changed x
         WHERE c.id = x.id
        RETURNING c.queue
    )
    SELECT pg_catalog.count(*)::integer, pg_catalog.array_agg(DISTINCT w.queue) INTO v_changed, v_queues
      FROM written w;
    PERFORM pg_catalog.pg_notify('lonnymq_wakeup', q.queue) FROM pg_catalog.unnest(v_queues) AS q(queue);
    RETURN v_changed;
END
$$;

-- Set or change a queue's queue-wide limits: a NULL argument leaves that limit as it is
-- (p_unlimited removes the cap, p_no_rate the bucket); with no limit left the queue's row
-- is deleted and its dequeues pay nothing again, unless the queue is paused (the row then
-- keeps the pause alone). The row is locked (or created) first.
-- Setting a cap where there was none counts the queue's leases already running (claimed
-- with SKIP LOCKED: a locked one is leaving flight, and waiting on it could deadlock with
-- its ack), so the cap holds at once. A new or changed rate starts with a full bucket.
-- Returns whether the queue has a limit now.
CREATE OR REPLACE FUNCTION lonnymq_configure_queue_v1(
    p_queue text, p_max_concurrency integer DEFAULT NULL, p_unlimited boolean DEFAULT false,
    p_rate_count integer DEFAULT NULL, p_rate_period_ms bigint DEFAULT NULL, p_rate_burst integer DEFAULT NULL,
    p_no_rate boolean DEFAULT false
) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_old      lonnymq_queue_config%ROWTYPE;
    v_new_rate boolean;
    v_max      integer;
    v_count    integer;
    v_period   bigint;
    v_burst    integer;
    v_in_flight integer;
BEGIN
    IF p_queue IS NULL OR pg_catalog.char_length(p_queue) NOT BETWEEN 1 AND 100 OR p_queue !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('queue', 'must be 1 to 100 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_queue));
    END IF;
    IF p_max_concurrency IS NOT NULL AND p_max_concurrency < 1 THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'must be positive or null (unlimited)', p_max_concurrency::text);
    END IF;
    IF p_max_concurrency IS NOT NULL AND coalesce(p_unlimited, false) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'cannot be combined with unlimited', p_max_concurrency::text);
    END IF;
    v_new_rate := p_rate_count IS NOT NULL OR p_rate_period_ms IS NOT NULL OR p_rate_burst IS NOT NULL;
    IF v_new_rate THEN
        IF coalesce(p_no_rate, false) THEN
            PERFORM lonnymq_raise_invalid_v1('rate', 'cannot be combined with no_rate', p_rate_count::text);
        END IF;
        PERFORM lonnymq_check_range_v1('rate_count', p_rate_count::bigint, 1::bigint, 1000000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_period_ms', p_rate_period_ms, 1::bigint, 31622400000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_burst', p_rate_burst::bigint, 1::bigint, 1000000::bigint, false);
    END IF;
    -- Two first configurations of one queue must not both count its leases: the second
    -- waits for the first (an advisory lock on the queue's name, beside the channels' ones).
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_lock_ns_v1() + 1, pg_catalog.hashtext(p_queue));
    SELECT * INTO v_old FROM lonnymq_queue_config qc WHERE qc.queue = p_queue FOR NO KEY UPDATE;
    v_max := CASE WHEN coalesce(p_unlimited, false) THEN NULL
                  ELSE coalesce(p_max_concurrency, v_old.max_concurrency) END;
    v_count := CASE WHEN v_new_rate THEN p_rate_count WHEN p_no_rate THEN NULL ELSE v_old.rate_count END;
    v_period := CASE WHEN v_new_rate THEN p_rate_period_ms WHEN p_no_rate THEN NULL ELSE v_old.rate_period_ms END;
    v_burst := CASE WHEN v_new_rate THEN p_rate_burst WHEN p_no_rate THEN NULL ELSE v_old.rate_burst END;
    PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    IF v_max IS NULL AND v_count IS NULL AND v_old.paused IS NOT TRUE THEN
        DELETE FROM lonnymq_queue_config qc WHERE qc.queue = p_queue;
        RETURN false;
    END IF;
    IF v_max IS NULL THEN
        v_in_flight := 0;
    ELSIF v_old.max_concurrency IS NULL THEN
        UPDATE lonnymq_message m SET queue_slot = true
         WHERE m.id IN (SELECT mm.id FROM lonnymq_message mm
                          JOIN lonnymq_channel c ON c.id = mm.channel_id
                         WHERE mm.lease_until IS NOT NULL AND c.queue = p_queue AND NOT mm.queue_slot
                           FOR UPDATE OF mm SKIP LOCKED);
        -- A new statement: it sees the leases just claimed and those flagged before (an ack
        -- of one of these that is under way gives its slot back after this commits).
        SELECT coalesce(pg_catalog.sum(m.slots), 0)::integer INTO v_in_flight
          FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
         WHERE m.queue_slot AND c.queue = p_queue;
    ELSE
        v_in_flight := v_old.in_flight;
    END IF;
    INSERT INTO lonnymq_queue_config AS qc (queue, max_concurrency, rate_count, rate_period_ms, rate_burst, in_flight,
                                            paused)
    VALUES (p_queue, v_max, v_count, v_period, v_burst, v_in_flight, coalesce(v_old.paused, false))
    ON CONFLICT (queue) DO UPDATE
       SET max_concurrency = excluded.max_concurrency,
           rate_count = excluded.rate_count,
           rate_period_ms = excluded.rate_period_ms,
           rate_burst = excluded.rate_burst,
           in_flight = excluded.in_flight,
           bucket_level = CASE WHEN v_new_rate OR p_no_rate THEN NULL ELSE qc.bucket_level END,
           next_token_at = CASE WHEN v_new_rate OR p_no_rate THEN NULL ELSE qc.next_token_at END,
           updated_at = pg_catalog.now();
    RETURN v_max IS NOT NULL OR v_count IS NOT NULL;
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
          LEFT JOIN (SELECT m.channel_id, pg_catalog.sum(m.slots) AS n FROM lonnymq_message m
                      WHERE m.lease_until IS NOT NULL AND m.slot_taken
                      GROUP BY m.channel_id) s ON s.channel_id = c.id
         WHERE c.in_flight <> coalesce(s.n, 0)
        UNION ALL
        SELECT NULL::bigint, qc.queue, NULL::text, 'queue_in_flight_mismatch',
               pg_catalog.format('in_flight=%s, slot-taking leases=%s', qc.in_flight, coalesce(s.n, 0))
          FROM lonnymq_queue_config qc
          LEFT JOIN (SELECT c.queue, pg_catalog.sum(m.slots) AS n
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
                                                c.next_token_at, c.hold_until, v_now) + p_grace_ms)
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

-- Figures per queue (all queues when p_queues is NULL), exact up to p_cap waiting messages
-- and estimated past it: `estimated` is true for a queue with more than p_cap waiting
-- messages or dead letters, or more than p_cap / 10 channels (its counts then come from a
-- sample, which is the whole table when the table has no more pages than the sample reads).
-- A paused channel's waiting messages count as paused only: never ready, never scheduled,
-- and never the oldest ready.
-- Cost, bounded whatever the backlog (docs/admin.md, "Figures at size"); K below is
-- GREATEST(p_cap / 100, 100):
-- - waiting messages (ready, scheduled, paused): each queue's first p_cap / 10 channels are
--   walked along the ready index (channel_id, dequeue_at, id) until p_cap + 1 entries are
--   read. A queue with at most p_cap / 10 channels and p_cap waiting messages is counted
--   exactly. Past either bound each figure is estimated from a TABLESAMPLE SYSTEM of about
--   K pages of the message table, scaled by the table's current size (pg_relation_size),
--   and is never less than what the walk counted. SYSTEM sampling reads whole pages, so a
--   queue that holds a small share of a large table, in few pages, is estimated roughly.
--   The sampled rows are told apart by their channel: with one estimated queue, by the few
--   channels that are not its own unpaused ones.
-- - oldest ready: exact for a queue counted exactly (the walk reads every channel's first
--   entry). An estimated queue: the oldest first entry of the K channels next in turn (the
--   eligible index) and of the K at their concurrency cap with the earliest turn, the
--   channels a backlog has kept waiting longest, without one probe per channel; a channel
--   waiting for its rate limit may hold an older ready message.
-- - in flight: exact, along the lease index (messages in flight only).
-- - dead: counted along the (queue, died_at) index up to p_cap + 1; past it estimated from a
--   sample of the dead-letter table in the same way (never less than p_cap + 1).
-- - channels, paused channels, released_total: exact, from the channel rows, plus
--   lonnymq_release_count and the pruned channels' releases (lonnymq_queue_released), so
--   released_total never falls when a channel is pruned; a queue whose channels were all
--   pruned keeps its row.
CREATE OR REPLACE FUNCTION lonnymq_queue_stats_v3(p_queues text[] DEFAULT NULL, p_cap bigint DEFAULT 100000)
RETURNS TABLE (id bigint, queue text, at timestamptz, channels bigint, paused_channels bigint,
               ready bigint, scheduled bigint, in_flight bigint, dead bigint, oldest_ready_ms bigint,
               released_total bigint, paused bigint, estimated boolean)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
-- The planner prices the bounded walks as if they read every channel's range: JIT compiling
-- a statement for that took a second at 100,000 channels, and a parallel plan ran the sample
-- once per worker. The walk reads each channel in index order and stops at its limit: a
-- bitmap scan and a sort, which a custom plan chose for channels it knew to be small, read
-- every entry of each channel it visits (0047_stats_walk_in_index_order).
SET jit = off
SET max_parallel_workers_per_gather = 0
SET enable_bitmapscan = off
SET enable_sort = off
AS $$
#variable_conflict use_column
DECLARE
    v_now bigint;
    v_heads bigint;
    v_max_channels bigint;
    v_pct double precision := 100;
    v_dead_pct double precision := 100;
    -- One entry per queue that has channels, in queue order.
    v_queues text[];
    v_channels bigint[];
    v_paused_channels bigint[];
    v_released numeric[];
    v_walked bigint[];
    v_ready bigint[];
    v_scheduled bigint[];
    v_paused bigint[];
    v_head bigint[];
    v_big text[];
    -- Queues past the bounds: their sampled counts, unscaled.
    v_s_queues text[];
    v_s_ready bigint[];
    v_s_scheduled bigint[];
    v_s_paused bigint[];
    v_dead_queues text[];
    v_big_dead text[];
BEGIN
    PERFORM lonnymq_check_range_v1('cap', p_cap, 1::bigint, 1000000000::bigint, false);
    v_now := lonnymq_now_ms_v1();
    v_heads := GREATEST(p_cap / 100, 100);
    v_max_channels := GREATEST(p_cap / 10, 1);
    -- Each queue's channel rows, and its walk: the first p_cap + 1 waiting messages of its
    -- first v_max_channels channels (all of them when the queue is within both bounds).
    SELECT pg_catalog.array_agg(q.queue ORDER BY q.queue), pg_catalog.array_agg(q.channels ORDER BY q.queue),
           pg_catalog.array_agg(q.paused_channels ORDER BY q.queue),
           pg_catalog.array_agg(q.released_total + coalesce(
               (SELECT pg_catalog.sum(rc.released) FROM lonnymq_release_count rc
                  JOIN lonnymq_channel c ON c.id = rc.channel_id WHERE c.queue = q.queue), 0::numeric) ORDER BY q.queue),
           pg_catalog.array_agg(w.n ORDER BY q.queue), pg_catalog.array_agg(w.ready ORDER BY q.queue),
           pg_catalog.array_agg(w.scheduled ORDER BY q.queue), pg_catalog.array_agg(w.paused ORDER BY q.queue),
           pg_catalog.array_agg(w.head ORDER BY q.queue),
           pg_catalog.array_agg(q.queue) FILTER (WHERE q.channels > v_max_channels OR w.n > p_cap)
      INTO v_queues, v_channels, v_paused_channels, v_released, v_walked, v_ready, v_scheduled, v_paused,
           v_head, v_big
      FROM (SELECT c.queue, pg_catalog.count(*) AS channels, pg_catalog.count(*) FILTER (WHERE c.paused) AS paused_channels,
                   pg_catalog.sum(c.released_total) AS released_total
              FROM lonnymq_channel c
             WHERE p_queues IS NULL OR c.queue = ANY (p_queues)
             GROUP BY c.queue) q
     CROSS JOIN LATERAL (
          SELECT pg_catalog.count(*) AS n,
                 pg_catalog.count(*) FILTER (WHERE NOT x.paused AND x.dequeue_at <= v_now) AS ready,
                 pg_catalog.count(*) FILTER (WHERE NOT x.paused AND x.dequeue_at > v_now) AS scheduled,
                 pg_catalog.count(*) FILTER (WHERE x.paused) AS paused,
                 pg_catalog.min(x.dequeue_at) FILTER (WHERE NOT x.paused) AS head
            FROM (SELECT c.paused, r.dequeue_at
                    FROM (SELECT c0.id, c0.paused FROM lonnymq_channel c0
                           WHERE c0.queue = q.queue LIMIT v_max_channels) c
                   CROSS JOIN LATERAL (SELECT m.dequeue_at FROM lonnymq_message m
                                        WHERE m.channel_id = c.id AND m.lease_until IS NULL
                                        -- In index order: a scan that stops at the limit (a
                                        -- bitmap scan would read the whole channel first).
                                        ORDER BY m.dequeue_at, m.id LIMIT p_cap + 1) r
                   LIMIT p_cap + 1) x
      ) w;
    IF v_big IS NOT NULL THEN
        -- A sample of about v_heads pages, of the table's size now (not the planner's last look).
        v_pct := LEAST(100::double precision,
                       100::double precision * v_heads::double precision
                       / GREATEST(pg_catalog.pg_relation_size('lonnymq_message'::regclass)::double precision
                                  / pg_catalog.current_setting('block_size')::double precision, 1::double precision));
        IF pg_catalog.cardinality(v_big) = 1 THEN
            -- One estimated queue (the usual case): a sampled row whose channel is not one of
            -- the other queues' or a paused one is in an unpaused channel of that queue, so
            -- only those few channels are hashed.
            SELECT ARRAY[v_big[1]],
                   ARRAY[pg_catalog.count(*) FILTER (WHERE x.id IS NULL AND m.dequeue_at <= v_now)],
                   ARRAY[pg_catalog.count(*) FILTER (WHERE x.id IS NULL AND m.dequeue_at > v_now)],
                   ARRAY[pg_catalog.count(*) FILTER (WHERE x.queue = v_big[1])]
              INTO v_s_queues, v_s_ready, v_s_scheduled, v_s_paused
              FROM lonnymq_message m TABLESAMPLE SYSTEM (v_pct)
              LEFT JOIN (SELECT c.id, c.queue FROM lonnymq_channel c
                          WHERE c.queue <> v_big[1] OR c.paused) x ON x.id = m.channel_id
             WHERE m.lease_until IS NULL;
        ELSE
            SELECT pg_catalog.array_agg(s.queue), pg_catalog.array_agg(s.ready), pg_catalog.array_agg(s.scheduled),
                   pg_catalog.array_agg(s.paused)
              INTO v_s_queues, v_s_ready, v_s_scheduled, v_s_paused
              FROM (SELECT c.queue,
                           pg_catalog.count(*) FILTER (WHERE NOT c.paused AND m.dequeue_at <= v_now) AS ready,
                           pg_catalog.count(*) FILTER (WHERE NOT c.paused AND m.dequeue_at > v_now) AS scheduled,
                           pg_catalog.count(*) FILTER (WHERE c.paused) AS paused
                      FROM lonnymq_message m TABLESAMPLE SYSTEM (v_pct)
                      JOIN lonnymq_channel c ON c.id = m.channel_id
                     WHERE m.lease_until IS NULL AND c.queue = ANY (v_big)
                     GROUP BY c.queue) s;
        END IF;
    END IF;
    -- Queues with dead letters (a skip scan of the (queue, died_at) index), and those with
    -- more than p_cap of them.
    WITH RECURSIVE dq AS (
        SELECT (SELECT pg_catalog.min(d.queue) FROM lonnymq_dead_message d
                 WHERE p_queues IS NULL OR d.queue = ANY (p_queues)) AS queue
        UNION ALL
        SELECT (SELECT pg_catalog.min(d.queue) FROM lonnymq_dead_message d
                 WHERE d.queue > dq.queue AND (p_queues IS NULL OR d.queue = ANY (p_queues)))
          FROM dq WHERE dq.queue IS NOT NULL
    )
    SELECT pg_catalog.array_agg(dq.queue),
           pg_catalog.array_agg(dq.queue) FILTER (
               WHERE (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM lonnymq_dead_message d WHERE d.queue = dq.queue
                                                       LIMIT p_cap + 1) x) > p_cap)
      INTO v_dead_queues, v_big_dead
      FROM dq
     WHERE dq.queue IS NOT NULL;
    IF v_big_dead IS NOT NULL THEN
        v_dead_pct := LEAST(100::double precision,
                            100::double precision * v_heads::double precision
                            / GREATEST(pg_catalog.pg_relation_size('lonnymq_dead_message'::regclass)::double precision
                                       / pg_catalog.current_setting('block_size')::double precision, 1::double precision));
    END IF;
    RETURN QUERY
    WITH per_queue AS (
        SELECT u.queue, u.channels, u.paused_channels, u.released, u.walked, u.ready, u.scheduled, u.paused, u.head,
               u.queue = ANY (coalesce(v_big, '{}'::text[])) AS big
          FROM ROWS FROM (pg_catalog.unnest(v_queues), pg_catalog.unnest(v_channels),
                          pg_catalog.unnest(v_paused_channels), pg_catalog.unnest(v_released),
                          pg_catalog.unnest(v_walked), pg_catalog.unnest(v_ready), pg_catalog.unnest(v_scheduled),
                          pg_catalog.unnest(v_paused), pg_catalog.unnest(v_head))
               AS u(queue, channels, paused_channels, released, walked, ready, scheduled, paused, head)
    ), sampled AS (
        SELECT u.queue, u.ready, u.scheduled, u.paused
          FROM ROWS FROM (pg_catalog.unnest(v_s_queues), pg_catalog.unnest(v_s_ready),
                          pg_catalog.unnest(v_s_scheduled), pg_catalog.unnest(v_s_paused))
               AS u(queue, ready, scheduled, paused)
    ), heads AS (
        -- An estimated queue's oldest waiting message: the first entries of the v_heads
        -- channels next in turn, and of the v_heads at their cap with the earliest turn.
        SELECT b.queue, pg_catalog.min(h.dequeue_at) AS head
          FROM pg_catalog.unnest(v_big) AS b(queue)
         CROSS JOIN LATERAL (
              (SELECT c.id FROM lonnymq_channel c
                WHERE c.queue = b.queue AND c.next_dequeue_at IS NOT NULL AND NOT c.paused
                  AND (c.max_concurrency IS NULL OR c.in_flight + least(c.head_slots, c.max_concurrency) <= c.max_concurrency)
                ORDER BY c.next_dequeue_at LIMIT v_heads)
              UNION ALL
              (SELECT c.id FROM lonnymq_channel c
                WHERE c.queue = b.queue AND NOT c.paused
                  AND c.in_flight + least(c.head_slots, c.max_concurrency) > c.max_concurrency
                ORDER BY c.next_dequeue_at NULLS LAST LIMIT v_heads)
          ) k
         CROSS JOIN LATERAL (SELECT m.dequeue_at FROM lonnymq_message m
                              WHERE m.channel_id = k.id AND m.lease_until IS NULL
                              ORDER BY m.dequeue_at, m.id LIMIT 1) h
         GROUP BY b.queue
    ), flying AS (
        SELECT c.queue, pg_catalog.count(*) AS n
          FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
         WHERE m.lease_until IS NOT NULL AND (p_queues IS NULL OR c.queue = ANY (p_queues))
         GROUP BY c.queue
    ), dead AS (
        SELECT u.queue, u.queue = ANY (coalesce(v_big_dead, '{}'::text[])) AS big,
               CASE WHEN u.queue = ANY (coalesce(v_big_dead, '{}'::text[]))
                    THEN (SELECT pg_catalog.count(*) FROM lonnymq_dead_message d TABLESAMPLE SYSTEM (v_dead_pct)
                           WHERE d.queue = u.queue)
                    ELSE (SELECT pg_catalog.count(*) FROM lonnymq_dead_message d WHERE d.queue = u.queue) END AS n
          FROM pg_catalog.unnest(v_dead_queues) AS u(queue)
    ), pruned AS (
        SELECT p.queue, p.released FROM lonnymq_queue_released p
         WHERE p_queues IS NULL OR p.queue = ANY (p_queues)
    ), queues AS (
        SELECT per_queue.queue FROM per_queue UNION SELECT dead.queue FROM dead
        UNION SELECT pruned.queue FROM pruned
    )
    SELECT NULL::bigint, q.queue, pg_catalog.clock_timestamp(),
           coalesce(pq.channels, 0), coalesce(pq.paused_channels, 0),
           CASE WHEN pq.big THEN GREATEST(pq.ready, pg_catalog.round(coalesce(s.ready, 0::bigint)::double precision * 100::double precision / v_pct)::bigint)
                ELSE coalesce(pq.ready, 0) END,
           CASE WHEN pq.big THEN GREATEST(pq.scheduled, pg_catalog.round(coalesce(s.scheduled, 0::bigint)::double precision * 100::double precision / v_pct)::bigint)
                ELSE coalesce(pq.scheduled, 0) END,
           coalesce(f.n, 0),
           CASE WHEN d.big THEN GREATEST(p_cap + 1, pg_catalog.round(d.n::double precision * 100::double precision / v_dead_pct)::bigint)
                ELSE coalesce(d.n, 0) END,
           CASE WHEN coalesce(h.head, pq.head) <= v_now THEN v_now - coalesce(h.head, pq.head) END,
           (coalesce(pq.released, 0::numeric) + coalesce(p.released, 0::bigint)::numeric)::bigint,
           CASE WHEN pq.big THEN GREATEST(pq.paused, pg_catalog.round(coalesce(s.paused, 0::bigint)::double precision * 100::double precision / v_pct)::bigint)
                ELSE coalesce(pq.paused, 0) END,
           coalesce(pq.big, false) OR coalesce(d.big, false)
      FROM queues q
      LEFT JOIN per_queue pq ON pq.queue = q.queue
      LEFT JOIN sampled s ON s.queue = q.queue
      LEFT JOIN heads h ON h.queue = q.queue
      LEFT JOIN flying f ON f.queue = q.queue
      LEFT JOIN dead d ON d.queue = q.queue
      LEFT JOIN pruned p ON p.queue = q.queue
     ORDER BY q.queue;
END
$$;
