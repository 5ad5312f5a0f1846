-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0017: periodic schedules hardened. lonnymq_fire_schedule_v1 appends with
-- pg_catalog.array_append (a polymorphic || could be beaten by an exact look-alike planted in
-- a schema on the path); the syncs call jsonb operators as OPERATOR(pg_catalog...); and
-- lonnymq_sync_schedules_v2 deletes only the declared rows of the queues the worker serves.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

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
        v_ids := pg_catalog.array_append(v_ids, lonnymq_enqueue_v1(
            v_schedule.queue, v_schedule.channel, v_schedule.payload, v_tick, NULL::bigint, 0,
            'lonnymq.periodic:' || v_schedule.id::text || ':' || v_tick::text,
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

-- Make the schedules declared in code what the table holds, when a worker starts: a new name
-- is added, a changed declaration replaces the row's definition (its next tick too; a pause
-- stays), an unchanged one keeps the row as it is (edits made in the admin, the next tick, so
-- ticks missed while no worker ran are caught up), and a declared row whose name is no
-- longer declared is deleted. Rows added in the admin (declared NULL) are left alone unless
-- a declaration takes their name. p_next_tick_ats: each declaration's first tick from now.
-- Concurrent syncs run one at a time (an advisory lock).
CREATE OR REPLACE FUNCTION lonnymq_sync_schedules_v1(p_names text[], p_declared jsonb[], p_next_tick_ats bigint[])
RETURNS TABLE (added integer, changed integer, removed integer)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_added   integer;
    v_changed integer;
    v_removed integer;
BEGIN
    PERFORM lonnymq_check_list_v1('names', pg_catalog.array_ndims(p_names));
    PERFORM lonnymq_check_list_v1('declared', pg_catalog.array_ndims(p_declared));
    PERFORM lonnymq_check_list_v1('next_tick_ats', pg_catalog.array_ndims(p_next_tick_ats));
    IF coalesce(pg_catalog.array_length(p_names, 1), 0) <> coalesce(pg_catalog.array_length(p_declared, 1), 0)
       OR coalesce(pg_catalog.array_length(p_names, 1), 0) <> coalesce(pg_catalog.array_length(p_next_tick_ats, 1), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('declared', 'must have one entry per name',
                                         pg_catalog.format('%s names', coalesce(pg_catalog.array_length(p_names, 1), 0)));
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_lock_ns_v1(), -160);

    DELETE FROM lonnymq_schedule s
     WHERE s.declared IS NOT NULL AND NOT (s.name = ANY (coalesce(p_names, '{}'::text[])));
    GET DIAGNOSTICS v_removed = ROW_COUNT;

    WITH written AS (
        INSERT INTO lonnymq_schedule AS s (name, queue, channel, cron, every_ms, timezone, payload, catch_up,
                                           max_attempts, next_tick_at, declared)
        SELECT d.name, d.declared OPERATOR(pg_catalog.->>) 'queue'::text,
               d.declared OPERATOR(pg_catalog.->>) 'channel'::text, d.declared OPERATOR(pg_catalog.->>) 'cron'::text,
               (d.declared OPERATOR(pg_catalog.->>) 'every_ms'::text)::bigint,
               d.declared OPERATOR(pg_catalog.->>) 'timezone'::text, d.declared OPERATOR(pg_catalog.->) 'payload'::text,
               (d.declared OPERATOR(pg_catalog.->>) 'catch_up'::text)::integer,
               (d.declared OPERATOR(pg_catalog.->>) 'max_attempts'::text)::integer,
               d.next_tick_at, d.declared
          FROM ROWS FROM (pg_catalog.unnest(p_names), pg_catalog.unnest(p_declared),
                         pg_catalog.unnest(p_next_tick_ats)) AS d(name, declared, next_tick_at)
            ON CONFLICT (name) DO UPDATE
           SET queue = excluded.queue, channel = excluded.channel, cron = excluded.cron,
               every_ms = excluded.every_ms, timezone = excluded.timezone, payload = excluded.payload,
               catch_up = excluded.catch_up, max_attempts = excluded.max_attempts,
               next_tick_at = excluded.next_tick_at, declared = excluded.declared, last_error = NULL
         WHERE s.declared IS DISTINCT FROM excluded.declared
        RETURNING (s.xmax OPERATOR(pg_catalog.=) '0'::xid) AS inserted
    )
    SELECT pg_catalog.count(*) FILTER (WHERE w.inserted), pg_catalog.count(*) FILTER (WHERE NOT w.inserted)
      INTO v_added, v_changed
      FROM written w;
    RETURN QUERY SELECT v_added, v_changed, v_removed;
END
$$;

-- lonnymq_sync_schedules_v1 scoped to the queues a worker serves (p_queues; NULL: every
-- queue): a declared row of another queue is never deleted, so workers whose code declares
-- different schedules (other handler modules) do not undo each other's. What the v1 comment
-- says holds for the rows of p_queues; new and changed declarations of any queue are written.
CREATE FUNCTION lonnymq_sync_schedules_v2(p_queues text[], p_names text[], p_declared jsonb[],
                                          p_next_tick_ats bigint[])
RETURNS TABLE (added integer, changed integer, removed integer)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_added   integer;
    v_changed integer;
    v_removed integer;
BEGIN
    PERFORM lonnymq_check_list_v1('queues', pg_catalog.array_ndims(p_queues));
    PERFORM lonnymq_check_list_v1('names', pg_catalog.array_ndims(p_names));
    PERFORM lonnymq_check_list_v1('declared', pg_catalog.array_ndims(p_declared));
    PERFORM lonnymq_check_list_v1('next_tick_ats', pg_catalog.array_ndims(p_next_tick_ats));
    IF coalesce(pg_catalog.array_length(p_names, 1), 0) <> coalesce(pg_catalog.array_length(p_declared, 1), 0)
       OR coalesce(pg_catalog.array_length(p_names, 1), 0) <> coalesce(pg_catalog.array_length(p_next_tick_ats, 1), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('declared', 'must have one entry per name',
                                         pg_catalog.format('%s names', coalesce(pg_catalog.array_length(p_names, 1), 0)));
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_lock_ns_v1(), -160);

    DELETE FROM lonnymq_schedule s
     WHERE s.declared IS NOT NULL AND NOT (s.name = ANY (coalesce(p_names, '{}'::text[])))
       AND (p_queues IS NULL OR s.queue = ANY (p_queues));
    GET DIAGNOSTICS v_removed = ROW_COUNT;

    WITH written AS (
        INSERT INTO lonnymq_schedule AS s (name, queue, channel, cron, every_ms, timezone, payload, catch_up,
                                           max_attempts, next_tick_at, declared)
        SELECT d.name, d.declared OPERATOR(pg_catalog.->>) 'queue'::text,
               d.declared OPERATOR(pg_catalog.->>) 'channel'::text, d.declared OPERATOR(pg_catalog.->>) 'cron'::text,
               (d.declared OPERATOR(pg_catalog.->>) 'every_ms'::text)::bigint,
               d.declared OPERATOR(pg_catalog.->>) 'timezone'::text, d.declared OPERATOR(pg_catalog.->) 'payload'::text,
               (d.declared OPERATOR(pg_catalog.->>) 'catch_up'::text)::integer,
               (d.declared OPERATOR(pg_catalog.->>) 'max_attempts'::text)::integer,
               d.next_tick_at, d.declared
          FROM ROWS FROM (pg_catalog.unnest(p_names), pg_catalog.unnest(p_declared),
                         pg_catalog.unnest(p_next_tick_ats)) AS d(name, declared, next_tick_at)
            ON CONFLICT (name) DO UPDATE
           SET queue = excluded.queue, channel = excluded.channel, cron = excluded.cron,
               every_ms = excluded.every_ms, timezone = excluded.timezone, payload = excluded.payload,
               catch_up = excluded.catch_up, max_attempts = excluded.max_attempts,
               next_tick_at = excluded.next_tick_at, declared = excluded.declared, last_error = NULL
         WHERE s.declared IS DISTINCT FROM excluded.declared
        RETURNING (s.xmax OPERATOR(pg_catalog.=) '0'::xid) AS inserted
    )
    SELECT pg_catalog.count(*) FILTER (WHERE w.inserted), pg_catalog.count(*) FILTER (WHERE NOT w.inserted)
      INTO v_added, v_changed
      FROM written w;
    RETURN QUERY SELECT v_added, v_changed, v_removed;
END
$$;
