-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0044: one live single enqueue. lonnymq_enqueue_task_v1,
-- lonnymq_fire_schedule_v1 and lonnymq_workflow_step_dead_v1 call lonnymq_enqueue_v2 with
-- 'skip' (what lonnymq_enqueue_v1 did), so lonnymq_enqueue_v1, whose body repeated _v2's,
-- is called by nothing of this release; it stays installed for the previous release
-- (superseded.sql). Same names, arguments and results for the three functions replaced.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

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

    v_id := lonnymq_enqueue_v2(p_queue, p_channel, p_payload, p_run_at_ms, NULL::bigint, p_priority, NULL::text,
                               'skip'::text, p_max_attempts, p_priority_step_ms, p_tolerance_ms);
    INSERT INTO lonnymq_task_result (id, backend, task_path, queue, channel, message_id, status, args, kwargs,
                                     priority, run_after, enqueued_at)
    VALUES (p_payload OPERATOR(pg_catalog.->>) 'result_id'::text, p_payload OPERATOR(pg_catalog.->>) 'backend'::text,
            p_payload OPERATOR(pg_catalog.->>) 'task'::text, p_queue, p_channel, v_id, 'READY',
            p_payload OPERATOR(pg_catalog.->) 'args'::text, p_payload OPERATOR(pg_catalog.->) 'kwargs'::text,
            p_priority, p_run_after, p_enqueued_at);
    RETURN v_id;
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
        v_ids := pg_catalog.array_append(v_ids, lonnymq_enqueue_v2(
            v_schedule.queue, v_schedule.channel, v_schedule.payload, v_tick, NULL::bigint, 0,
            'lonnymq.periodic:' || v_schedule.id::text || ':' || v_tick::text, 'skip'::text,
            coalesce(v_schedule.max_attempts, p_default_max_attempts), p_priority_step_ms, p_tolerance_ms));
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
           SET on_failure_message_id = lonnymq_enqueue_v2(
                   v_w.on_failure_queue, v_w.on_failure_channel, v_w.on_failure_payload, NULL::bigint,
                   NULL::bigint, 0, 'lonnymq.workflow_failed:' OPERATOR(pg_catalog.||) v_workflow_id::text,
                   'skip'::text, v_w.on_failure_max_attempts, 1000::bigint, 50::bigint)
         WHERE w.id = v_workflow_id;
    END IF;
    RETURN NULL;
END
$$;
