-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0031: dedup keys for Django Tasks (django_lonnymq.tasks.dedup,
-- docs/tasks.md), one result row per message.
-- - lonnymq_task_message_idx (new): a message's result, by message id. Built with a
--   plain CREATE INDEX, which holds off writes to lonnymq_task_result (task enqueues and
--   result updates) while it builds: prune old results first on a large table.
-- - lonnymq_enqueue_task_keyed_v1 (new): a task enqueue with a dedup key and mode ('skip',
--   'replace', 'update'), its message and its result row in one call. lonnymq_enqueue_task_v1
--   stays as it was, for enqueues without a key.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- The result of a message (lonnymq_enqueue_task_keyed_v1: the key's message's result).
CREATE INDEX lonnymq_task_message_idx ON lonnymq_task_result (message_id);

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
CREATE FUNCTION lonnymq_enqueue_task_keyed_v1(
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
