-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0008: workers you can see. A lonnymq_worker row per worker process,
-- written by its heartbeat (lonnymq_worker_beat_v1) and marked stopped on a graceful
-- shutdown (lonnymq_worker_stop_v1).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- One row per worker process, written by the heartbeat the worker already runs (one upsert
-- per beat, never per message) and marked stopped on a graceful shutdown. A row whose
-- heartbeat is older than LONNYMQ_WORKER_LOST_AFTER is a lost worker; any worker's beat
-- deletes rows silent or stopped for longer than LONNYMQ_WORKER_PRUNE_AFTER. A message's
-- leased_by holds its worker's name.
CREATE TABLE lonnymq_worker (
    name          text        PRIMARY KEY,
    -- This run of the worker: a restarted process with the same name is a new instance.
    instance      uuid        NOT NULL,
    host          text        NOT NULL,
    pid           integer     NOT NULL,
    queues        text[]      NOT NULL,
    concurrency   integer     NOT NULL,
    started_at    timestamptz NOT NULL,
    heartbeat_at  timestamptz NOT NULL,
    stopped_at    timestamptz NULL,
    -- As of the last heartbeat: messages leased (running or waiting for a thread), handled
    -- successfully, and failed (retried or dead).
    in_flight     integer     NOT NULL DEFAULT 0,
    processed     bigint      NOT NULL DEFAULT 0,
    failed        bigint      NOT NULL DEFAULT 0,
    CONSTRAINT lonnymq_worker_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_worker_name_not_blank CHECK (name ~ '\S'),
    CONSTRAINT lonnymq_worker_counts_nonnegative
        CHECK (in_flight >= 0 AND processed >= 0 AND failed >= 0 AND concurrency >= 1)
) WITH (fillfactor = 50);

-- A worker's heartbeat: record its figures under its name and return the name it holds.
-- The name is taken when it is free, or held by a worker that stopped or has been silent
-- longer than p_lost_after_ms; a name a live worker holds is made unique with '#2', '#3'...
-- (the worker then leases under the returned name). Also deletes rows silent or stopped
-- for longer than p_prune_after_ms. One statement's worth of work per beat.
CREATE FUNCTION lonnymq_worker_beat_v1(
    p_name           text,
    p_instance       uuid,
    p_host           text,
    p_pid            integer,
    p_queues         text[],
    p_concurrency    integer,
    p_started_at     timestamptz,
    p_in_flight      integer,
    p_processed      bigint,
    p_failed         bigint,
    p_lost_after_ms  bigint,
    p_prune_after_ms bigint
) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now     timestamptz := pg_catalog.clock_timestamp();
    v_lost    timestamptz;
    v_name    text := p_name;
    v_suffix  integer := 1;
BEGIN
    IF p_name IS NULL OR pg_catalog.char_length(p_name) NOT BETWEEN 1 AND 200 OR p_name !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('name', 'must be 1 to 200 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_name));
    END IF;
    IF p_instance IS NULL OR p_host IS NULL OR p_pid IS NULL OR p_queues IS NULL OR p_started_at IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('worker', 'instance, host, pid, queues and started_at are required', NULL);
    END IF;
    PERFORM lonnymq_check_list_v1('queues', pg_catalog.array_ndims(p_queues));
    PERFORM lonnymq_check_range_v1('concurrency', p_concurrency::bigint, 1::bigint, 2147483647::bigint, false);
    PERFORM lonnymq_check_range_v1('in_flight', p_in_flight::bigint, 0::bigint, 2147483647::bigint, false);
    PERFORM lonnymq_check_range_v1('processed', p_processed, 0::bigint, 9223372036854775807::bigint, false);
    PERFORM lonnymq_check_range_v1('failed', p_failed, 0::bigint, 9223372036854775807::bigint, false);
    PERFORM lonnymq_check_range_v1('lost_after', p_lost_after_ms, 1::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('prune_after', p_prune_after_ms, 1::bigint, 31622400000::bigint, false);
    v_lost := v_now - pg_catalog.make_interval(secs => p_lost_after_ms::double precision / 1000::double precision);

    LOOP
        -- Our own row: the usual beat.
        UPDATE lonnymq_worker w
           SET heartbeat_at = v_now, in_flight = p_in_flight, processed = p_processed,
               failed = p_failed, queues = p_queues, concurrency = p_concurrency
         WHERE w.name = v_name AND w.instance = p_instance AND w.stopped_at IS NULL;
        EXIT WHEN FOUND;
        -- A free name, or one whose holder stopped or went silent: take it.
        INSERT INTO lonnymq_worker AS w (name, instance, host, pid, queues, concurrency, started_at,
                                         heartbeat_at, stopped_at, in_flight, processed, failed)
        VALUES (v_name, p_instance, p_host, p_pid, p_queues, p_concurrency, p_started_at,
                v_now, NULL, p_in_flight, p_processed, p_failed)
        ON CONFLICT (name) DO UPDATE
           SET instance = EXCLUDED.instance, host = EXCLUDED.host, pid = EXCLUDED.pid,
               queues = EXCLUDED.queues, concurrency = EXCLUDED.concurrency,
               started_at = EXCLUDED.started_at, heartbeat_at = EXCLUDED.heartbeat_at,
               stopped_at = NULL, in_flight = EXCLUDED.in_flight,
               processed = EXCLUDED.processed, failed = EXCLUDED.failed
         WHERE w.stopped_at IS NOT NULL OR w.heartbeat_at < v_lost;
        EXIT WHEN FOUND;
        -- A live worker holds it: the next name.
        v_suffix := v_suffix + 1;
        IF v_suffix > 1000 THEN
            PERFORM lonnymq_raise_invalid_v1('name', 'is held by 1000 live workers already',
                                             pg_catalog.quote_literal(p_name));
        END IF;
        v_name := pg_catalog.left(p_name, 200 - 1 - pg_catalog.length(v_suffix::text)) || '#' || v_suffix::text;
    END LOOP;

    DELETE FROM lonnymq_worker w
     WHERE coalesce(w.stopped_at, w.heartbeat_at)
           < v_now - pg_catalog.make_interval(secs => p_prune_after_ms::double precision / 1000::double precision)
       AND w.name <> v_name;
    RETURN v_name;
END
$$;

-- A graceful shutdown: the worker's row is marked stopped at once, with its last figures.
-- Returns false when the row is gone or another instance holds the name now.
CREATE FUNCTION lonnymq_worker_stop_v1(
    p_name      text,
    p_instance  uuid,
    p_in_flight integer,
    p_processed bigint,
    p_failed    bigint
) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM lonnymq_check_range_v1('in_flight', p_in_flight::bigint, 0::bigint, 2147483647::bigint, false);
    PERFORM lonnymq_check_range_v1('processed', p_processed, 0::bigint, 9223372036854775807::bigint, false);
    PERFORM lonnymq_check_range_v1('failed', p_failed, 0::bigint, 9223372036854775807::bigint, false);
    UPDATE lonnymq_worker w
       SET stopped_at = v_now, heartbeat_at = v_now, in_flight = p_in_flight,
           processed = p_processed, failed = p_failed
     WHERE w.name = p_name AND w.instance = p_instance;
    RETURN FOUND;
END
$$;
