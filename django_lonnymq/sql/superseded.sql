-- django-lonnymq: superseded functions. `python manage.py migrate` still installs each of
-- them, but the app no longer calls any: no named statement of queries.sql or stats.sql and
-- no function of schema.sql refers to one (tests/migrations/test_superseded.py checks both
-- ways). They stay installed for the code of the previous release, which calls them while a
-- rolling deploy runs old and new workers side by side (docs/sql.md).
--
-- When one goes: a function the code of release N stopped calling stays installed in N, for
-- the rolling deploy from N-1, and a migration of N+1 may drop it. Each function's comment
-- names the live function that replaced it, the migration that added that one, and the
-- release that may drop it: "kept for rolling deploys from 0.1.x; may be dropped in 0.3.0"
-- (0.1.x calls it, 0.2.0 no longer does, 0.3.0 may drop it).
--
-- These bodies are frozen like the migrations that installed them: old code relies on them
-- as they are. To drop one, add a migration that drops it (its reverse reinstalls it with
-- sql.restore()) and delete it here; a function another one here calls goes with it or
-- after it.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- ---------------------------------------------------------------------------------------
-- Configuring a channel (the code moved to _v2 in 0006, to _v3 in 0010)
-- ---------------------------------------------------------------------------------------

-- Superseded by lonnymq_configure_channel_v3 (migration 0010_weights_and_token_buckets,
-- after _v2 from 0006_pinned_and_bounded).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Create a channel or change some of its limits, all three given (the first API's form):
-- NULL p_max_concurrency means unlimited, NULL p_paused means not paused.
CREATE FUNCTION lonnymq_configure_channel_v1(
    p_queue text, p_channel text, p_max_concurrency integer, p_release_interval_ms bigint,
    p_paused boolean DEFAULT false
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM lonnymq_check_range_v1('release_interval_ms', p_release_interval_ms, 0::bigint, 31622400000::bigint, false);
    RETURN lonnymq_configure_channel_v2(p_queue, p_channel, p_max_concurrency, p_max_concurrency IS NULL,
                                        p_release_interval_ms, coalesce(p_paused, false));
END
$$;

-- Superseded by lonnymq_configure_channel_v3 (migration 0010_weights_and_token_buckets).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- lonnymq_configure_channel_v1 calls it.
-- Create a channel or change the limits given (the form before weights and token buckets):
-- the same as lonnymq_configure_channel_v3 with weight and rate left as they are.
CREATE FUNCTION lonnymq_configure_channel_v2(
    p_queue text, p_channel text, p_max_concurrency integer DEFAULT NULL, p_unlimited boolean DEFAULT false,
    p_release_interval_ms bigint DEFAULT NULL, p_paused boolean DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN lonnymq_configure_channel_v3(p_queue, p_channel, p_max_concurrency, p_unlimited,
                                        p_release_interval_ms, p_paused);
END
$$;

-- ---------------------------------------------------------------------------------------
-- Figures before paused was a state of its own (0007_paused_state)
-- ---------------------------------------------------------------------------------------

-- Superseded by lonnymq_queue_stats_v2 (migration 0007_paused_state).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- lonnymq_record_samples_v1 calls it. A paused channel's messages count as ready or
-- scheduled, paused is 0.
-- Exact figures per queue (all queues when p_queues is NULL), as sample rows with id NULL.
-- Cost: ready/scheduled walk the ready index (channel_id, dequeue_at, id) once per channel,
-- i.e. one index entry per waiting message of the queue (index-only when the visibility
-- map allows); in_flight walks the lease index (messages in flight only); dead walks the
-- (queue, died_at) index. No scan of the message table's heap by channel. released_total
-- is the sum of the channel rows' counters and of lonnymq_release_count (a small table).
CREATE FUNCTION lonnymq_queue_stats_v1(p_queues text[] DEFAULT NULL)
RETURNS SETOF lonnymq_queue_sample
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    WITH now_ms AS (
        SELECT lonnymq_now_ms_v1() AS v
    ), ch AS (
        SELECT c.id, c.queue, c.paused, c.released_total + coalesce(r.n, 0::bigint) AS released_total
          FROM lonnymq_channel c
          LEFT JOIN (SELECT rc.channel_id, pg_catalog.sum(rc.released)::bigint AS n FROM lonnymq_release_count rc
                      GROUP BY rc.channel_id) r ON r.channel_id = c.id
         WHERE p_queues IS NULL OR c.queue = ANY (p_queues)
    ), waiting AS (
        SELECT ch.queue, pg_catalog.count(*) AS channels, pg_catalog.count(*) FILTER (WHERE ch.paused) AS paused_channels,
               pg_catalog.sum(w.ready) AS ready, pg_catalog.sum(w.scheduled) AS scheduled, pg_catalog.min(w.head) AS head,
               pg_catalog.sum(ch.released_total) AS released_total
          FROM ch CROSS JOIN now_ms
          CROSS JOIN LATERAL (
              SELECT pg_catalog.count(*) FILTER (WHERE m.dequeue_at <= now_ms.v) AS ready,
                     pg_catalog.count(*) FILTER (WHERE m.dequeue_at > now_ms.v) AS scheduled,
                     pg_catalog.min(m.dequeue_at) AS head
                FROM lonnymq_message m
               WHERE m.channel_id = ch.id AND m.lease_until IS NULL
          ) w
         GROUP BY ch.queue
    ), flying AS (
        SELECT ch.queue, pg_catalog.count(*) AS n
          FROM lonnymq_message m JOIN ch ON ch.id = m.channel_id
         WHERE m.lease_until IS NOT NULL
         GROUP BY ch.queue
    ), dead AS (
        SELECT d.queue, pg_catalog.count(*) AS n FROM lonnymq_dead_message d
         WHERE p_queues IS NULL OR d.queue = ANY (p_queues)
         GROUP BY d.queue
    ), queues AS (
        SELECT waiting.queue FROM waiting UNION SELECT dead.queue FROM dead
    )
    SELECT NULL::bigint, q.queue, pg_catalog.clock_timestamp(),
           coalesce(w.channels, 0), coalesce(w.paused_channels, 0),
           coalesce(w.ready, 0)::bigint, coalesce(w.scheduled, 0)::bigint,
           coalesce(f.n, 0), coalesce(d.n, 0),
           CASE WHEN w.head <= now_ms.v THEN now_ms.v - w.head END,
           coalesce(w.released_total, 0)::bigint, 0::bigint
      FROM queues q CROSS JOIN now_ms
      LEFT JOIN waiting w ON w.queue = q.queue
      LEFT JOIN flying f ON f.queue = q.queue
      LEFT JOIN dead d ON d.queue = q.queue
     ORDER BY q.queue
$$;

-- Superseded by lonnymq_record_samples_v2 (migration 0007_paused_state).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Record one sample per queue now (its figures and the running sum of released_total) and
-- drop samples older than p_keep_ms. Returns the rows recorded.
CREATE FUNCTION lonnymq_record_samples_v1(p_keep_ms bigint DEFAULT 86400000)
RETURNS SETOF lonnymq_queue_sample
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM lonnymq_check_range_v1('keep', p_keep_ms, 1::bigint, 31622400000::bigint, false);
    DELETE FROM lonnymq_queue_sample s
     WHERE s.at < pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => p_keep_ms::double precision / 1000::double precision);
    RETURN QUERY
        INSERT INTO lonnymq_queue_sample (queue, at, channels, paused_channels, ready, scheduled,
                                          in_flight, dead, oldest_ready_ms, released_total)
        SELECT x.queue, x.at, x.channels, x.paused_channels, x.ready, x.scheduled,
               x.in_flight, x.dead, x.oldest_ready_ms, x.released_total
          FROM lonnymq_queue_stats_v1(NULL::text[]) x
        RETURNING *;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Leases before running messages could be cancelled or time out (0014_running_control)
-- ---------------------------------------------------------------------------------------

-- Superseded by lonnymq_extend_v2 (migration 0014_running_control).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Extend leases (heartbeat). Returns the ids extended; a missing id lost its lease.
CREATE FUNCTION lonnymq_extend_v1(p_ids bigint[], p_tokens uuid[], p_lease_ms bigint) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    PERFORM lonnymq_check_range_v1('lease', p_lease_ms, 1::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_list_v1('tokens', pg_catalog.array_ndims(p_tokens));
    IF coalesce(pg_catalog.cardinality(p_ids), 0) <> coalesce(pg_catalog.cardinality(p_tokens), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('tokens', 'must have one token per id', pg_catalog.cardinality(p_tokens)::text);
    END IF;
    WITH ext AS (
        UPDATE lonnymq_message m SET lease_until = lonnymq_now_ms_v1() + p_lease_ms
         WHERE m.id = ANY (p_ids)
           AND (m.id, m.lease_token) IN (SELECT u.id, u.token FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_tokens)) AS u(id, token))
        RETURNING m.id
    )
    SELECT coalesce(pg_catalog.array_agg(ext.id), ARRAY[]::bigint[]) INTO v_ids FROM ext;
    RETURN v_ids;
END
$$;

-- Superseded by lonnymq_fail_v2 (migration 0014_running_control).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- A handler failed (or asked for a retry, or to discard the message). Retries with
-- exponential backoff and jitter, or after p_retry_delay_ms when given; dead-letters the
-- message when it is discarded or its attempts are used up. Returns 'retry' or 'dead'.
CREATE FUNCTION lonnymq_fail_v1(
    p_id               bigint,
    p_token            uuid,
    p_error            text    DEFAULT NULL,
    p_retry_delay_ms   bigint  DEFAULT NULL,
    p_discard          boolean DEFAULT false,
    p_backoff_base_ms  bigint  DEFAULT 1000,
    p_backoff_max_ms   bigint  DEFAULT 3600000,
    p_tolerance_ms     bigint  DEFAULT 50
) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_msg   record;
    v_delay bigint;
BEGIN
    PERFORM lonnymq_check_range_v1('retry_delay', p_retry_delay_ms, 0::bigint, 3155760000000::bigint, true);
    PERFORM lonnymq_check_range_v1('backoff_base', p_backoff_base_ms, 0::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('backoff_max', p_backoff_max_ms, 0::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    SELECT m.id, m.attempts, m.max_attempts, m.lease_token INTO v_msg
      FROM lonnymq_message m WHERE m.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % does not exist (acked, cancelled or dead)', p_id
            USING ERRCODE = 'LQ004';
    END IF;
    IF v_msg.lease_token IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION 'lease on message % is stale: it expired and the message was released again', p_id
            USING ERRCODE = 'LQ003';
    END IF;
    IF p_discard OR v_msg.attempts >= v_msg.max_attempts THEN
        PERFORM lonnymq_bury_v1(ARRAY[p_id], CASE WHEN p_discard THEN 'discarded' ELSE 'failed' END, p_error);
        RETURN 'dead';
    END IF;
    IF p_retry_delay_ms IS NOT NULL THEN
        v_delay := p_retry_delay_ms;
    ELSE
        -- Equal jitter: half the exponential step for sure, the other half at random.
        -- In double precision: base * 2^40 would overflow bigint before least() caps it.
        v_delay := least(p_backoff_max_ms::double precision,
                         p_backoff_base_ms::double precision
                         * pg_catalog.power(2::double precision, least(v_msg.attempts - 1, 40)::double precision))::bigint;
        v_delay := v_delay / 2 + (pg_catalog.random() * (v_delay / 2)::double precision)::bigint;
    END IF;
    PERFORM lonnymq_unlease_v1(ARRAY[p_id], ARRAY[lonnymq_now_ms_v1() + v_delay], p_error, false, p_tolerance_ms);
    RETURN 'retry';
END
$$;

-- Superseded by lonnymq_cancel_v2 (migration 0014_running_control).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Delete messages that are not in flight (and free their dedup keys). Returns the ids
-- cancelled; an in-flight message is left alone (its worker will ack or fail it).
CREATE FUNCTION lonnymq_cancel_v1(p_ids bigint[]) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    WITH gone AS (
        DELETE FROM lonnymq_message m
         WHERE m.id = ANY (p_ids) AND m.lease_token IS NULL
        RETURNING m.id, m.channel_id, m.dedup_key
    ), freed AS (
        DELETE FROM lonnymq_dedup d USING gone g
         WHERE d.channel_id = g.channel_id AND d.dedup_key = g.dedup_key AND d.message_id = g.id
    )
    SELECT coalesce(pg_catalog.array_agg(g.id ORDER BY g.id), ARRAY[]::bigint[]) INTO v_ids FROM gone g;
    RETURN v_ids;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Schedule sync before it was scoped to a worker's queues (0017_schedule_hardening)
-- ---------------------------------------------------------------------------------------

-- Superseded by lonnymq_sync_schedules_v2 (migration 0017_schedule_hardening).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Make the schedules declared in code what the table holds, when a worker starts: a new name
-- is added, a changed declaration replaces the row's definition (its next tick too; a pause
-- stays), an unchanged one keeps the row as it is (edits made in the admin, the next tick, so
-- ticks missed while no worker ran are caught up), and a declared row whose name is no
-- longer declared is deleted. Rows added in the admin (declared NULL) are left alone unless
-- a declaration takes their name. p_next_tick_ats: each declaration's first tick from now.
-- Concurrent syncs run one at a time (an advisory lock).
CREATE FUNCTION lonnymq_sync_schedules_v1(p_names text[], p_declared jsonb[], p_next_tick_ats bigint[])
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
