-- django-lonnymq 0045: durable handlers (docs/durable.md). A handler's steps are checkpointed
-- in lonnymq_step, in the transaction of the step's own writes; a sleep or a wait suspends the
-- message (given back, no attempt spent, no slot held) until its time or its event; events
-- live in lonnymq_event, first write wins, pruned after LONNYMQ_EVENT_RETENTION.

-- Functions created here pin the app's schema (SET search_path FROM CURRENT).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- One row per step, sleep or wait a message's handler reached, keyed by the message and the
-- name the handler gave it. No foreign key: rows outlive a message that went dead (a requeue
-- keeps its checkpoints, since it keeps its id), and acks pay nothing for them; the workers'
-- housekeeping deletes the rows of messages that are in neither table
-- (lonnymq_durable_prune_v1). A 'step' row is done when written (its result committed with
-- the step's writes); a 'sleep' or 'wait' row is pending until its time passed or its event
-- came, and then holds the event's payload (NULL: the wait timed out).
CREATE TABLE lonnymq_step (
    message_id  bigint      NOT NULL,
    name        text        NOT NULL,
    kind        text        NOT NULL,
    result      jsonb       NULL,
    event_key   text        NULL,
    until_ms    bigint      NULL,
    done        boolean     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT lonnymq_step_pkey PRIMARY KEY (message_id, name),
    CONSTRAINT lonnymq_step_name_length CHECK (pg_catalog.char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_step_kind_known CHECK (kind IN ('step', 'sleep', 'wait')),
    CONSTRAINT lonnymq_step_wait_has_key CHECK ((kind = 'wait') = (event_key IS NOT NULL)),
    CONSTRAINT lonnymq_step_event_key_length
        CHECK (event_key IS NULL OR pg_catalog.char_length(event_key) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_step_result_size CHECK (result IS NULL OR pg_catalog.pg_column_size(result) <= 1048576),
    CONSTRAINT lonnymq_step_until_range CHECK (until_ms IS NULL OR until_ms BETWEEN 0 AND 253402300799999),
    CONSTRAINT lonnymq_step_done_when_step CHECK (kind <> 'step' OR done),
    CONSTRAINT lonnymq_step_sleep_has_time CHECK (kind <> 'sleep' OR until_ms IS NOT NULL)
);
-- An emit finds its waiters here: one probe, never a scan.
CREATE INDEX lonnymq_step_waiting_idx ON lonnymq_step (event_key) WHERE kind = 'wait' AND NOT done;
-- Suspended messages (a pending sleep or wait), for the counts and the admin.
CREATE INDEX lonnymq_step_pending_idx ON lonnymq_step (message_id) WHERE kind <> 'step' AND NOT done;

-- Events by key: the first emit of a key is kept (later ones are ignored) until it is older
-- than the retention, so a wait that comes after its emit still sees it.
CREATE TABLE lonnymq_event (
    key         text        NOT NULL,
    payload     jsonb       NOT NULL,
    emitted_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT lonnymq_event_pkey PRIMARY KEY (key),
    CONSTRAINT lonnymq_event_key_length CHECK (pg_catalog.char_length(key) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_event_payload_size CHECK (pg_catalog.pg_column_size(payload) <= 1048576)
);
CREATE INDEX lonnymq_event_emitted_idx ON lonnymq_event (emitted_at);

-- Advisory lock namespace of event keys: an emit and a wait's first look at its event hold
-- the key's lock until they end, so a wait never misses an emit that commits meanwhile.
CREATE FUNCTION lonnymq_event_lock_ns_v1() RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 1280135476 $$;

CREATE FUNCTION lonnymq_check_step_name_v1(p_field text, p_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_name IS NULL OR pg_catalog.char_length(p_name) NOT BETWEEN 1 AND 200 THEN
        PERFORM lonnymq_raise_invalid_v1(p_field, 'must be 1 to 200 characters',
                                         coalesce(pg_catalog.quote_literal(p_name), 'NULL'));
    END IF;
END
$$;

-- Checkpoint a step's result in the caller's transaction (the one holding the step's own
-- writes), while the caller still holds the message's lease: a worker that lost its lease
-- commits nothing of the step. A name already checkpointed is refused (LQ001).
CREATE FUNCTION lonnymq_step_save_v1(p_id bigint, p_token uuid, p_name text, p_result jsonb) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_token uuid;
BEGIN
    PERFORM lonnymq_check_step_name_v1('name', p_name);
    IF p_result IS NOT NULL AND pg_catalog.pg_column_size(p_result) > 1048576 THEN
        PERFORM lonnymq_raise_invalid_v1('result', 'must be at most 1 MiB stored',
                                         pg_catalog.pg_column_size(p_result)::text);
    END IF;
    SELECT m.lease_token INTO v_token FROM lonnymq_message m WHERE m.id = p_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % does not exist (acked, cancelled or dead)', p_id USING ERRCODE = 'LQ004';
    END IF;
    IF v_token IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION 'lease on message % is stale: it expired and the message was released again', p_id
            USING ERRCODE = 'LQ003';
    END IF;
    INSERT INTO lonnymq_step (message_id, name, kind, result, done)
    VALUES (p_id, p_name, 'step', p_result, true)
    ON CONFLICT (message_id, name) DO NOTHING;
    IF NOT FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('name', 'is already a checkpoint of this message',
                                         pg_catalog.quote_literal(p_name));
    END IF;
END
$$;

-- A handler reaches a sleep (p_key NULL) or a wait for the event p_key. p_delay_ms: how long
-- the sleep lasts or the wait may take (NULL: a wait without a timeout), from the first time
-- it is reached: a re-run keeps the time of the first. Returns
--   'go', NULL       a sleep whose time has passed: go on;
--   'event', payload a wait whose event came (before or after the wait);
--   'timeout', NULL  a wait whose time passed without its event;
--   'suspend', until the message must be suspended until then (NULL: until its event).
-- The caller holds the lease (checked). Writes the row in the caller's transaction.
CREATE FUNCTION lonnymq_durable_pause_v1(p_id bigint, p_token uuid, p_name text, p_key text, p_delay_ms bigint)
RETURNS TABLE (state text, result jsonb, until_ms bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now   bigint := lonnymq_now_ms_v1();
    v_kind  text := CASE WHEN p_key IS NULL THEN 'sleep' ELSE 'wait' END;
    v_token uuid;
    v_row   record;
    v_event jsonb;
    p_until_ms bigint;
BEGIN
    PERFORM lonnymq_check_step_name_v1('name', p_name);
    IF p_key IS NOT NULL AND pg_catalog.char_length(p_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM lonnymq_raise_invalid_v1('key', 'must be 1 to 200 characters', pg_catalog.quote_literal(p_key));
    END IF;
    IF p_key IS NULL AND p_delay_ms IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('delay', 'must be given for a sleep', 'NULL');
    END IF;
    PERFORM lonnymq_check_range_v1(CASE WHEN p_key IS NULL THEN 'delay' ELSE 'timeout' END, p_delay_ms,
                                   0::bigint, 31622400000::bigint, true);
    p_until_ms := v_now + p_delay_ms;
    SELECT m.lease_token INTO v_token FROM lonnymq_message m WHERE m.id = p_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % does not exist (acked, cancelled or dead)', p_id USING ERRCODE = 'LQ004';
    END IF;
    IF v_token IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION 'lease on message % is stale: it expired and the message was released again', p_id
            USING ERRCODE = 'LQ003';
    END IF;
    IF p_key IS NOT NULL THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_event_lock_ns_v1(), pg_catalog.hashtext(p_key));
    END IF;
    SELECT s.kind, s.result, s.event_key, s.until_ms, s.done INTO v_row
      FROM lonnymq_step s WHERE s.message_id = p_id AND s.name = p_name FOR UPDATE;
    IF FOUND THEN
        IF v_row.kind <> v_kind THEN
            PERFORM lonnymq_raise_invalid_v1('name', pg_catalog.format('is already a %s of this message', v_row.kind),
                                             pg_catalog.quote_literal(p_name));
        END IF;
        IF v_row.done THEN
            RETURN QUERY SELECT CASE WHEN v_kind = 'sleep' THEN 'go' WHEN v_row.result IS NULL THEN 'timeout'
                                     ELSE 'event' END, v_row.result, v_row.until_ms;
            RETURN;
        END IF;
        IF v_row.until_ms IS NOT NULL AND v_row.until_ms <= v_now THEN
            UPDATE lonnymq_step s SET done = true WHERE s.message_id = p_id AND s.name = p_name;
            RETURN QUERY SELECT CASE WHEN v_kind = 'sleep' THEN 'go' ELSE 'timeout' END, NULL::jsonb, v_row.until_ms;
            RETURN;
        END IF;
        RETURN QUERY SELECT 'suspend'::text, NULL::jsonb, v_row.until_ms;
        RETURN;
    END IF;
    IF p_key IS NOT NULL THEN
        SELECT e.payload INTO v_event FROM lonnymq_event e WHERE e.key = p_key;
        IF FOUND THEN
            INSERT INTO lonnymq_step (message_id, name, kind, result, event_key, until_ms, done)
            VALUES (p_id, p_name, 'wait', v_event, p_key, p_until_ms, true);
            RETURN QUERY SELECT 'event'::text, v_event, p_until_ms;
            RETURN;
        END IF;
    END IF;
    INSERT INTO lonnymq_step (message_id, name, kind, event_key, until_ms, done)
    VALUES (p_id, p_name, v_kind, p_key, p_until_ms, p_key IS NULL AND p_until_ms <= v_now);
    IF p_key IS NULL AND p_until_ms <= v_now THEN
        RETURN QUERY SELECT 'go'::text, NULL::jsonb, p_until_ms;
        RETURN;
    END IF;
    RETURN QUERY SELECT 'suspend'::text, NULL::jsonb, p_until_ms;
END
$$;

-- The worker ends a run that slept or waited on p_name: the message goes back without
-- spending the attempt, its slots given back, due when the sleep ends or the wait times out
-- (9999-12-31 for a wait without a timeout: an emit or "resume now" makes it due). It stays
-- in its channel, so it is served in its channel's turn when it resumes. A wait whose event
-- came while the handler ran is due at once (the row is read FOR SHARE: an emit that
-- marked it and has not committed yet is waited for). A message someone asked to cancel is
-- dead-lettered as 'cancelled'. Returns 'suspended' or 'dead'.
CREATE FUNCTION lonnymq_suspend_v1(p_id bigint, p_token uuid, p_name text, p_tolerance_ms bigint DEFAULT 50)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_msg record;
    v_row record;
    v_at  bigint;
BEGIN
    PERFORM lonnymq_check_step_name_v1('name', p_name);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    SELECT m.id, m.lease_token, m.cancel_requested INTO v_msg FROM lonnymq_message m WHERE m.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % does not exist (acked, cancelled or dead)', p_id USING ERRCODE = 'LQ004';
    END IF;
    IF v_msg.lease_token IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION 'lease on message % is stale: it expired and the message was released again', p_id
            USING ERRCODE = 'LQ003';
    END IF;
    SELECT s.until_ms, s.done INTO v_row FROM lonnymq_step s
     WHERE s.message_id = p_id AND s.name = p_name AND s.kind <> 'step' FOR SHARE;
    IF NOT FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('name', 'names no sleep or wait of this message', pg_catalog.quote_literal(p_name));
    END IF;
    v_at := CASE WHEN v_row.done THEN lonnymq_now_ms_v1()
                 ELSE coalesce(v_row.until_ms, 253402300799999) END;
    PERFORM lonnymq_unlease_v1(ARRAY[p_id], ARRAY[v_at], NULL, true, p_tolerance_ms);
    RETURN CASE WHEN v_msg.cancel_requested THEN 'dead' ELSE 'suspended' END;
END
$$;

-- Emit the event p_key, in the caller's transaction: the first emit of a key is stored
-- (a later one, while the first is kept, changes nothing and returns NULL); its waiters get
-- the payload and are made due now, which they see when the caller commits (a rollback
-- wakes nobody). Waiters are found through lonnymq_step_waiting_idx. Their channels are
-- woken as an enqueue wakes them (a mark, no channel row lock held until the caller's
-- commit). Returns the ids of the waiting messages it woke.
CREATE FUNCTION lonnymq_emit_event_v1(p_key text, p_payload jsonb, p_tolerance_ms bigint DEFAULT 50)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now bigint := lonnymq_now_ms_v1();
    v_ids bigint[];
    v_ch  record;
BEGIN
    IF p_key IS NULL OR pg_catalog.char_length(p_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM lonnymq_raise_invalid_v1('key', 'must be 1 to 200 characters', coalesce(pg_catalog.quote_literal(p_key), 'NULL'));
    END IF;
    IF p_payload IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('payload', 'must not be SQL NULL (JSON null is jsonb ''null'')', 'NULL');
    ELSIF pg_catalog.jsonb_path_exists(p_payload, 'strict $.**{101}'::jsonpath) THEN
        PERFORM lonnymq_raise_too_deep_v1('payload'::text, p_payload);
    ELSIF pg_catalog.pg_column_size(p_payload) > 1048576 THEN
        PERFORM lonnymq_raise_invalid_v1('payload', 'must be at most 1 MiB stored', pg_catalog.pg_column_size(p_payload)::text);
    END IF;
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_event_lock_ns_v1(), pg_catalog.hashtext(p_key));
    INSERT INTO lonnymq_event (key, payload) VALUES (p_key, p_payload) ON CONFLICT (key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    WITH woken AS (
        UPDATE lonnymq_step s SET done = true, result = p_payload
         WHERE s.event_key = p_key AND s.kind = 'wait' AND NOT s.done
        RETURNING s.message_id
    )
    SELECT pg_catalog.array_agg(woken.message_id ORDER BY woken.message_id) INTO v_ids FROM woken;
    IF v_ids IS NULL THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    -- The producer's shared locks on the channels, then the messages: a suspended one is
    -- made due now (a running one is not touched: its worker's suspend finds the row done).
    PERFORM lonnymq_lock_channels_v1(pg_catalog.array_agg(m.channel_id))
       FROM lonnymq_message m WHERE m.id = ANY (v_ids) AND m.lease_token IS NULL HAVING pg_catalog.count(*) > 0;
    FOR v_ch IN
        WITH moved AS (
            UPDATE lonnymq_message m SET dequeue_at = v_now
             WHERE m.id = ANY (v_ids) AND m.lease_until IS NULL AND m.lease_token IS NULL AND m.dequeue_at > v_now
            RETURNING m.channel_id
        )
        SELECT DISTINCT moved.channel_id, c.queue FROM moved JOIN lonnymq_channel c ON c.id = moved.channel_id
         ORDER BY moved.channel_id
    LOOP
        PERFORM lonnymq_mark_v1(v_ch.queue, v_ch.channel_id, v_now, p_tolerance_ms);
    END LOOP;
    RETURN v_ids;
END
$$;

-- "Resume now" (the admin, tests): the pending sleeps of these messages end now and their
-- pending waits time out now (the handler's wait returns None); the messages are due now.
-- Returns the ids made due.
CREATE FUNCTION lonnymq_resume_v1(p_ids bigint[], p_tolerance_ms bigint DEFAULT 50) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now bigint := lonnymq_now_ms_v1();
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    UPDATE lonnymq_step s SET until_ms = v_now
     WHERE s.message_id = ANY (p_ids) AND s.kind <> 'step' AND NOT s.done
       AND (s.until_ms IS NULL OR s.until_ms > v_now);
    RETURN lonnymq_run_now_v1(p_ids, p_tolerance_ms);
END
$$;

-- "Run again from step X": forget the checkpoint p_name of a message and every one written
-- after it, so the next run does them again. Returns the names forgotten.
CREATE FUNCTION lonnymq_forget_steps_v1(p_id bigint, p_name text) RETURNS text[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_from  timestamptz;
    v_names text[];
BEGIN
    PERFORM lonnymq_check_step_name_v1('name', p_name);
    SELECT s.created_at INTO v_from FROM lonnymq_step s WHERE s.message_id = p_id AND s.name = p_name;
    IF NOT FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('name', 'names no checkpoint of this message', pg_catalog.quote_literal(p_name));
    END IF;
    WITH gone AS (
        DELETE FROM lonnymq_step s WHERE s.message_id = p_id AND s.created_at >= v_from RETURNING s.name, s.created_at
    )
    SELECT pg_catalog.array_agg(gone.name ORDER BY gone.created_at) INTO v_names FROM gone;
    RETURN v_names;
END
$$;

-- Housekeeping: events older than the retention, and checkpoints of messages that are gone
-- (acked, or dead and then deleted), at most p_limit of each per call. Returns how many rows.
CREATE FUNCTION lonnymq_durable_prune_v1(p_event_retention_ms bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_events integer;
    v_steps  integer;
BEGIN
    PERFORM lonnymq_check_range_v1('event_retention', p_event_retention_ms, 0::bigint, 3155760000000::bigint, false);
    PERFORM lonnymq_check_range_v1('limit', p_limit::bigint, 1::bigint, 100000::bigint, false);
    DELETE FROM lonnymq_event e
     WHERE e.key IN (SELECT o.key FROM lonnymq_event o
                      WHERE o.emitted_at < pg_catalog.now() - pg_catalog.make_interval(secs => p_event_retention_ms / 1000.0)
                      ORDER BY o.emitted_at LIMIT p_limit);
    GET DIAGNOSTICS v_events = ROW_COUNT;
    DELETE FROM lonnymq_step s
     WHERE s.message_id IN (SELECT DISTINCT o.message_id FROM lonnymq_step o
                             WHERE NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.id = o.message_id)
                               AND NOT EXISTS (SELECT 1 FROM lonnymq_dead_message d WHERE d.id = o.message_id)
                             LIMIT p_limit);
    GET DIAGNOSTICS v_steps = ROW_COUNT;
    RETURN v_events + v_steps;
END
$$;
