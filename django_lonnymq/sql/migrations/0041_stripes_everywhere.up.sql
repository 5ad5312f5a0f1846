-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0041: a transaction holds one shared advisory lock per channel for its first
-- 64 channels and one per stripe after that, in one call or in many: at most 64 + 1,024 slots
-- of the server's lock table however many channels it writes into. A transaction that made
-- 10,000 enqueue() calls into as many channels held 10,000 (0040 bounded only one call into
-- many channels), and so did a requeue of the dead letters of 10,000 channels, a run_now()
-- of messages in 10,000 channels, or a workflow whose root steps name 10,000 channels.
-- - New: lonnymq_lock_channel_v1, one channel's shared lock, or its stripe's once the
--   transaction holds 64 channel locks (counted in the transaction-local setting
--   lonnymq.channel_locks).
-- - lonnymq_lock_channels_v1 counts its channel locks there too, and takes stripes when they
--   would pass 64.
-- - lonnymq_enqueue_v1, lonnymq_enqueue_v2 and lonnymq_enqueue_task_keyed_v1 lock through
--   lonnymq_lock_channel_v1.
-- - lonnymq_requeue_dead_v1: the channels' locks in one call after their rows are locked;
--   a channel deleted and created again meanwhile (a new id) is locked alone, as before.
-- - lonnymq_run_now_v1: the channels of the messages it moves, in one call.
-- - lonnymq_workflow_release_v1 (a start's root steps): the channels created in name order,
--   then their locks in one call.
-- Same names, arguments and results for the seven functions replaced.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- A producer's shared advisory locks, held until its transaction ends, so that no dequeuer
-- parks a channel it is about to write ready work into: one per channel for the first 64
-- channels a transaction writes into, one per stripe after that (see
-- lonnymq_stripe_lock_ns_v1), so a transaction holds at most 64 + 1,024 of the lock table's
-- slots however many channels it writes into, in one call or in thousands. The count of
-- channel locks lives in a transaction-local setting, lonnymq.channel_locks (a savepoint's
-- rollback takes back its locks and its count alike).
CREATE FUNCTION lonnymq_lock_channel_v1(p_channel_id bigint) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_held integer := coalesce(NULLIF(pg_catalog.current_setting('lonnymq.channel_locks', true), ''), '0')::integer;
BEGIN
    IF v_held < 64 THEN
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(p_channel_id));
        PERFORM pg_catalog.set_config('lonnymq.channel_locks', (v_held + 1)::text, true);
    ELSE
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_stripe_lock_ns_v1(), lonnymq_stripe_key_v1(p_channel_id));
    END IF;
END
$$;

-- The same for the channels of one call, in one order (by channel id, or by stripe): one lock
-- per channel while the transaction's channel locks stay within 64, else one per stripe.
CREATE OR REPLACE FUNCTION lonnymq_lock_channels_v1(p_channel_ids bigint[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_held integer := coalesce(NULLIF(pg_catalog.current_setting('lonnymq.channel_locks', true), ''), '0')::integer;
    v_ids  bigint[];
BEGIN
    SELECT pg_catalog.array_agg(DISTINCT u.id ORDER BY u.id) INTO v_ids
      FROM pg_catalog.unnest(p_channel_ids) AS u(id) WHERE u.id IS NOT NULL;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    IF v_held + pg_catalog.cardinality(v_ids) <= 64 THEN
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(f.id))
           FROM pg_catalog.unnest(v_ids) WITH ORDINALITY AS f(id, i) ORDER BY f.i;
        PERFORM pg_catalog.set_config('lonnymq.channel_locks', (v_held + pg_catalog.cardinality(v_ids))::text, true);
    ELSE
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_stripe_lock_ns_v1(), f.stripe)
           FROM (SELECT DISTINCT lonnymq_stripe_key_v1(u.id) AS stripe
                   FROM pg_catalog.unnest(v_ids) AS u(id)) f ORDER BY f.stripe;
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

    -- "An enqueue into this channel is in flight": dequeuers will not park it meanwhile (its
    -- lock, or its stripe's past the transaction's 64th channel lock).
    PERFORM lonnymq_lock_channel_v1(v_channel_id);
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

    -- "An enqueue into this channel is in flight": dequeuers will not park it meanwhile (its
    -- lock, or its stripe's past the transaction's 64th channel lock).
    PERFORM lonnymq_lock_channel_v1(v_channel_id);
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
        v_channel_id := lonnymq_channel_id_v1(v_row.queue, v_row.channel);
        -- A channel deleted after the locks above and created again since has a new id.
        IF v_locked IS NULL OR v_channel_id <> ALL (v_locked) THEN
            PERFORM lonnymq_lock_channel_v1(v_channel_id);
        END IF;
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

-- Put steps (locked by the caller, ready: pending = 0) into the message table, as an
-- enqueue would: channels created in name order, their shared advisory locks (per channel or
-- per stripe, lonnymq_lock_channels_v1), one wake-up mark per channel (which NOTIFYs the
-- queue's workers at commit).
CREATE OR REPLACE FUNCTION lonnymq_workflow_release_v1(p_ids bigint[], p_tolerance_ms bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now        bigint := lonnymq_now_ms_v1();
    v_group      record;
    v_channel_id bigint;
    v_channel_ids bigint[];
    v_n          integer := 0;
BEGIN
    IF p_ids IS NULL OR pg_catalog.cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    -- The channels (created in name order), then their shared locks in one call: at most
    -- 1,024, however many channels the roots of a workflow name.
    SELECT pg_catalog.array_agg(x.id) INTO v_channel_ids
      FROM (SELECT lonnymq_channel_id_v1(g.queue, g.channel) AS id
              FROM (SELECT DISTINCT s.queue, s.channel FROM lonnymq_workflow_step s
                     WHERE s.id = ANY (p_ids) AND s.state = 'waiting' AND s.pending = 0) g
             ORDER BY g.queue, g.channel) x;
    IF v_channel_ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM lonnymq_lock_channels_v1(v_channel_ids);
    FOR v_group IN
        SELECT s.queue, s.channel, pg_catalog.min(s.delay_ms) AS delay_ms
          FROM lonnymq_workflow_step s
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting' AND s.pending = 0
         GROUP BY s.queue, s.channel ORDER BY s.queue, s.channel
    LOOP
        v_channel_id := lonnymq_channel_id_v1(v_group.queue, v_group.channel);
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
