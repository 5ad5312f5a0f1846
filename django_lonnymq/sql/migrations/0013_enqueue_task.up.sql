-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0013: a Django Task's message and result row in one call.

-- Functions created here pin the app's schema (SET search_path FROM CURRENT).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- A Django Task in one call (django_lonnymq.tasks): its message, then its result row, so an
-- enqueue outside a transaction is one statement and one round trip. The payload carries
-- the result's id, backend alias, task path, args and kwargs; the row copies them from it.
CREATE FUNCTION lonnymq_enqueue_task_v1(
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

    v_id := lonnymq_enqueue_v1(p_queue, p_channel, p_payload, p_run_at_ms, NULL::bigint, p_priority, NULL::text,
                               p_max_attempts, p_priority_step_ms, p_tolerance_ms);
    INSERT INTO lonnymq_task_result (id, backend, task_path, queue, channel, message_id, status, args, kwargs,
                                     priority, run_after, enqueued_at)
    VALUES (p_payload OPERATOR(pg_catalog.->>) 'result_id'::text, p_payload OPERATOR(pg_catalog.->>) 'backend'::text,
            p_payload OPERATOR(pg_catalog.->>) 'task'::text, p_queue, p_channel, v_id, 'READY',
            p_payload OPERATOR(pg_catalog.->) 'args'::text, p_payload OPERATOR(pg_catalog.->) 'kwargs'::text,
            p_priority, p_run_after, p_enqueued_at);
    RETURN v_id;
END
$$;
