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

-- Superseded by lonnymq_queue_stats_v3 (migration 0035_stats_at_size, after _v2 from
-- 0007_paused_state).
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

-- Superseded by lonnymq_record_samples_v3 (migration 0035_stats_at_size, after _v2 from
-- 0007_paused_state).
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

-- ---------------------------------------------------------------------------------------
-- Enqueue and publish before dedup modes (0025_dedup_modes)
-- ---------------------------------------------------------------------------------------

-- Superseded by lonnymq_enqueue_many_v4 (migration 0053_slots, after _v2 from 0025_dedup_modes
-- and _v3 from 0049_costs).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- lonnymq_publish_v1 calls it.
-- Many messages of one queue, any channels, in one call. Returns the ids in input order (the
-- existing id where a dedup key repeats, also within the batch). NULL arrays mean "defaults
-- for every row". Channels are created in name order and locked in id order, and dedup keys
-- are claimed in (channel, key) order, so concurrent batches never deadlock, whatever their
-- row order.
CREATE FUNCTION lonnymq_enqueue_many_v1(
    p_queue            text,
    p_channels         text[],
    p_payloads         jsonb[],
    p_run_at_ms        bigint[]  DEFAULT NULL,
    p_delay_ms         bigint[]  DEFAULT NULL,
    p_priorities       integer[] DEFAULT NULL,
    p_dedup_keys       text[]    DEFAULT NULL,
    p_max_attempts     integer[] DEFAULT NULL,
    p_default_max_attempts integer DEFAULT 5,
    p_priority_step_ms bigint    DEFAULT 1000,
    p_tolerance_ms     bigint    DEFAULT 50
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
BEGIN
    IF coalesce(pg_catalog.cardinality(p_channels), 0) <> v_n
       OR (p_run_at_ms IS NOT NULL AND pg_catalog.cardinality(p_run_at_ms) <> v_n)
       OR (p_delay_ms IS NOT NULL AND pg_catalog.cardinality(p_delay_ms) <> v_n)
       OR (p_priorities IS NOT NULL AND pg_catalog.cardinality(p_priorities) <> v_n)
       OR (p_dedup_keys IS NOT NULL AND pg_catalog.cardinality(p_dedup_keys) <> v_n)
       OR (p_max_attempts IS NOT NULL AND pg_catalog.cardinality(p_max_attempts) <> v_n) THEN
        PERFORM lonnymq_raise_invalid_v1('items', 'arrays must all have the same length', v_n::text);
    END IF;
    PERFORM lonnymq_check_list_v1('channels', pg_catalog.array_ndims(p_channels));
    PERFORM lonnymq_check_list_v1('payloads', pg_catalog.array_ndims(p_payloads));
    PERFORM lonnymq_check_list_v1('run_at', pg_catalog.array_ndims(p_run_at_ms));
    PERFORM lonnymq_check_list_v1('delay', pg_catalog.array_ndims(p_delay_ms));
    PERFORM lonnymq_check_list_v1('priorities', pg_catalog.array_ndims(p_priorities));
    PERFORM lonnymq_check_list_v1('dedup_keys', pg_catalog.array_ndims(p_dedup_keys));
    PERFORM lonnymq_check_list_v1('max_attempts', pg_catalog.array_ndims(p_max_attempts));
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
                      pg_catalog.unnest(coalesce(p_max_attempts, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))))
           WITH ORDINALITY AS u(channel, payload, run_at, delay, priority, dedup_key, max_attempts, ord)
     WHERE u.channel IS NULL OR pg_catalog.char_length(u.channel) NOT BETWEEN 1 AND 200 OR u.channel !~ '\S'
        OR u.payload IS NULL
        OR pg_catalog.jsonb_path_exists(u.payload, 'strict $.**{101}'::jsonpath)
        OR coalesce(u.max_attempts, p_default_max_attempts) IS NULL
        OR coalesce(u.max_attempts, p_default_max_attempts) NOT BETWEEN 1 AND 1000
        OR (u.dedup_key IS NOT NULL AND pg_catalog.char_length(u.dedup_key) NOT BETWEEN 1 AND 200)
        OR coalesce(u.priority, 0) NOT BETWEEN 0 AND 100
        OR u.delay NOT BETWEEN 0 AND 3155760000000
        OR u.run_at NOT BETWEEN 0 AND v_now + 3155760000000
        OR (u.run_at IS NOT NULL AND u.delay IS NOT NULL)
        OR (coalesce(u.priority, 0) > 0 AND coalesce(u.run_at, v_now + coalesce(u.delay, 0)) > v_now)
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
        ELSE
            -- Priority, delay or run time: the same checks and errors as a single enqueue.
            PERFORM lonnymq_dequeue_at_v1(v_now, v_bad.run_at, v_bad.delay, coalesce(v_bad.priority, 0),
                                          p_priority_step_ms);
        END IF;
    END IF;

    -- Missing channels in name order, then every channel's shared lock in id order ("an
    -- enqueue into this channel is in flight"). The lookup is a join: "name = ANY (array)"
    -- would, in the generic plan, test every channel of the queue against the whole batch.
    -- Their keys first (lonnymq_channel_key, since 0059): the key decides who creates a channel.
    PERFORM pg_catalog.set_config('lonnymq.channel_keys', 'written', true);
    WITH created AS (
        INSERT INTO lonnymq_channel_key (queue, name)
        SELECT DISTINCT p_queue, u.name FROM pg_catalog.unnest(p_channels) AS u(name)
         WHERE NOT EXISTS (SELECT 1 FROM lonnymq_channel_key k WHERE k.queue = p_queue AND k.name = u.name)
         ORDER BY 2
        ON CONFLICT (queue, name) DO NOTHING
        RETURNING id, queue, name
    )
    INSERT INTO lonnymq_channel (id, queue, name) SELECT n.id, n.queue, n.name FROM created n ORDER BY n.name;
    PERFORM pg_catalog.set_config('lonnymq.channel_keys', '', true);
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
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(f.id))
       FROM pg_catalog.unnest(v_channel_ids) AS f(id) ORDER BY f.id;
    -- No prune or delete_channel deletes them until this transaction ends (0036).
    PERFORM lonnymq_hold_channels_v1(v_channel_ids);

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
                       coalesce(u.max_attempts, p_default_max_attempts) AS max_attempts
                  FROM ROWS FROM (pg_catalog.unnest(p_channels),
                                  pg_catalog.unnest(p_payloads),
                                  pg_catalog.unnest(coalesce(p_run_at_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_delay_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_priorities, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_dedup_keys, pg_catalog.array_fill(NULL::text, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_max_attempts, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))))
                       WITH ORDINALITY AS u(channel, payload, run_at, delay, priority, dedup_key, max_attempts, ord)
                  JOIN ROWS FROM (pg_catalog.unnest(v_channel_ids), pg_catalog.unnest(v_channel_names)) AS f(id, name) ON f.name = u.channel
                 ORDER BY u.ord) s
    ), claimed AS (
        INSERT INTO lonnymq_dedup (channel_id, dedup_key, message_id)
        SELECT DISTINCT ON (r.channel_id, r.dedup_key) r.channel_id, r.dedup_key, r.new_id
          FROM rows r
         WHERE r.dedup_key IS NOT NULL
         ORDER BY r.channel_id, r.dedup_key, r.ord
        ON CONFLICT (channel_id, dedup_key) DO NOTHING
        RETURNING message_id
    ), inserted AS (
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
        SELECT r.new_id, r.channel_id, r.payload, r.dequeue_at, r.priority, r.max_attempts, r.dedup_key
          FROM rows r
         WHERE r.dedup_key IS NULL OR r.new_id IN (SELECT c.message_id FROM claimed c)
        RETURNING id, channel_id, dequeue_at
    ), woken AS (
        SELECT i.channel_id, pg_catalog.min(i.dequeue_at) AS at FROM inserted i GROUP BY i.channel_id
    )
    SELECT (SELECT pg_catalog.array_agg(r.new_id ORDER BY r.ord) FROM rows r),
           (SELECT pg_catalog.array_agg(r.channel_id ORDER BY r.ord) FROM rows r),
           (SELECT pg_catalog.array_agg(i.id) FROM inserted i),
           (SELECT pg_catalog.array_agg(w.channel_id ORDER BY w.channel_id) FROM woken w),
           (SELECT pg_catalog.array_agg(w.at ORDER BY w.channel_id) FROM woken w)
      INTO v_ids, v_row_channels, v_inserted_ids, v_wake_ids, v_wake_ats;

    -- Rows whose key was already taken (earlier, by a concurrent batch, or by an earlier row
    -- of this one) get the existing id: one index probe each, in a new statement that sees
    -- the commits ON CONFLICT waited for. A key whose row vanished meanwhile (its holder
    -- rolled back, or it was cancelled or pruned) has no id to give: like a single enqueue,
    -- the batch fails with a serialization error, for the caller to retry.
    IF coalesce(pg_catalog.cardinality(v_inserted_ids), 0) < v_n THEN
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

-- Superseded by lonnymq_publish_v4 (migration 0053_slots, after _v2 from 0025_dedup_modes and
-- _v3 from 0051_publish_costs).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Publish events to a topic: each event becomes one message in every queue subscribed to it,
-- in the caller's transaction, through lonnymq_enqueue_many_v1 queue by queue in queue-name
-- order (so concurrent publishers take their locks in one order). An event's key names its
-- channel in each queue (NULL: 'default'). Returns one row per subscribed queue, with the
-- message ids in event order; no row when the topic has no subscriber, whose events are
-- counted in lonnymq_unrouted instead.
CREATE FUNCTION lonnymq_publish_v1(
    p_topic                text,
    p_keys                 text[],
    p_payloads             jsonb[],
    p_run_at_ms            bigint[]  DEFAULT NULL,
    p_dedup_keys           text[]    DEFAULT NULL,
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
       OR (p_dedup_keys IS NOT NULL AND pg_catalog.cardinality(p_dedup_keys) <> v_n) THEN
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
        ids := lonnymq_enqueue_many_v1(v_queue, v_channels, p_payloads, p_run_at_ms, NULL::bigint[],
                                       NULL::integer[], p_dedup_keys, NULL::integer[],
                                       p_default_max_attempts, p_priority_step_ms, p_tolerance_ms);
        RETURN NEXT;
    END LOOP;
    IF NOT v_routed THEN
        -- Still checked, as a routed publish would be: a bad event is an error either way.
        PERFORM lonnymq_check_range_v1('max_attempts', p_default_max_attempts::bigint, 1::bigint, 1000::bigint, false);
        INSERT INTO lonnymq_unrouted AS r (topic, events, last_published_at)
        VALUES (p_topic, v_n::bigint, pg_catalog.now())
        ON CONFLICT (topic) DO UPDATE
           SET events = r.events + EXCLUDED.events, last_published_at = EXCLUDED.last_published_at;
    END IF;
END
$$;

-- ---------------------------------------------------------------------------------------
-- The scheduler check before it was bounded (0030_check_v2)
-- ---------------------------------------------------------------------------------------

-- Superseded by lonnymq_check_v2 (migration 0030_check_v2).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Scheduler invariants, for tests and the health command. One row per problem:
--   in_flight_mismatch: in_flight differs from the leases that took a slot;
--   queue_in_flight_mismatch: a queue-wide cap's in_flight differs from the leases of the
--     queue that took a queue slot (channel_id and channel NULL);
--   stranded: a ready message is due but its channel will not look at it.
CREATE FUNCTION lonnymq_check_v1(p_grace_ms bigint DEFAULT 1000)
RETURNS TABLE (channel_id bigint, queue text, channel text, problem text, detail text)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
BEGIN
    PERFORM lonnymq_check_range_v1('grace', p_grace_ms, 0::bigint, 86400000::bigint, false);
    RETURN QUERY
        SELECT c.id, c.queue, c.name, 'in_flight_mismatch',
               pg_catalog.format('in_flight=%s, slot-taking leases=%s', c.in_flight, coalesce(s.n, 0))
          FROM lonnymq_channel c
          LEFT JOIN (SELECT m.channel_id, pg_catalog.count(*) AS n FROM lonnymq_message m
                      WHERE m.slot_taken GROUP BY m.channel_id) s ON s.channel_id = c.id
         WHERE c.in_flight <> coalesce(s.n, 0)
        UNION ALL
        SELECT NULL::bigint, qc.queue, NULL::text, 'queue_in_flight_mismatch',
               pg_catalog.format('in_flight=%s, slot-taking leases=%s', qc.in_flight, coalesce(s.n, 0))
          FROM lonnymq_queue_config qc
          LEFT JOIN (SELECT c.queue, pg_catalog.count(*) AS n
                       FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
                      WHERE m.queue_slot GROUP BY c.queue) s ON s.queue = qc.queue
         WHERE qc.max_concurrency IS NOT NULL AND qc.in_flight <> coalesce(s.n, 0)
        UNION ALL
        SELECT c.id, c.queue, c.name, 'stranded',
               pg_catalog.format('head due at %s, next_dequeue_at=%s', h.dequeue_at, coalesce(c.next_dequeue_at::text, 'null'))
          FROM lonnymq_channel c
          CROSS JOIN LATERAL (SELECT mm.dequeue_at FROM lonnymq_message mm
                               WHERE mm.channel_id = c.id AND mm.lease_until IS NULL
                               ORDER BY mm.dequeue_at, mm.id LIMIT 1) h
         WHERE NOT c.paused
           AND h.dequeue_at < lonnymq_now_ms_v1() - p_grace_ms
           -- Its next turn is missing, or later than the head (and the rate limit) need and
           -- still ahead: a turn that has already come is eligible now, however old the head.
           AND (c.next_dequeue_at IS NULL
                OR c.next_dequeue_at > greatest(h.dequeue_at, c.last_dequeue_at + c.release_interval_ms,
                                                c.next_token_at, lonnymq_now_ms_v1()) + p_grace_ms)
           -- A producer's committed wake-up mark is applied by the next dequeue.
           AND NOT EXISTS (SELECT 1 FROM lonnymq_wake w
                            WHERE w.channel_id = c.id
                              AND w.dequeue_at <= greatest(h.dequeue_at, lonnymq_now_ms_v1()) + p_grace_ms);
END
$$;

-- Superseded by lonnymq_check_limits_v2 (migration 0030_check_v2).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Channels whose limits drifted from where they come from: one row per limit that is not
-- the channel's own and differs from its plan's value (or, without a plan, the default).
-- lonnymq_check_v1's companion (the named statement check runs both).
CREATE FUNCTION lonnymq_check_limits_v1()
RETURNS TABLE (channel_id bigint, queue text, channel text, problem text, detail text)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT c.id, c.queue, c.name, 'limit_drift'::text,
           pg_catalog.format('%s=%s, but %s gives %s', v.lim, coalesce(v.actual, 'null'),
                             CASE WHEN p.id IS NULL THEN 'the default'
                                  ELSE 'plan ' || pg_catalog.quote_literal(p.name) END,
                             coalesce(v.expected, 'null'))
      FROM lonnymq_channel c
      LEFT JOIN lonnymq_plan p ON p.id = c.plan_id
     CROSS JOIN LATERAL (VALUES
        ('weight', NOT c.own_weight, c.weight::text, coalesce(p.weight, 1)::text),
        ('max_concurrency', NOT c.own_max_concurrency, c.max_concurrency::text, p.max_concurrency::text),
        ('release_interval_ms', NOT c.own_release_interval, c.release_interval_ms::text,
         coalesce(p.release_interval_ms, 0)::text),
        ('rate', NOT c.own_rate,
         NULLIF(pg_catalog.concat_ws('/', c.rate_count, c.rate_period_ms, c.rate_burst), ''),
         NULLIF(pg_catalog.concat_ws('/', p.rate_count, p.rate_period_ms, p.rate_burst), ''))
     ) AS v(lim, inherited, actual, expected)
     WHERE v.inherited AND v.actual IS DISTINCT FROM v.expected
$$;

-- ---------------------------------------------------------------------------------------
-- Workflows (the ack of steps moved to _v2 in 0032)
-- ---------------------------------------------------------------------------------------

-- Superseded by lonnymq_workflow_ack_v2 (migration 0032_workflow_ack_v2).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Ack steps (the worker's ack for messages whose dedup key says they are steps): the ack of
-- lonnymq_ack_v1, and in the same transaction each step acked now succeeds with its output,
-- its children count it, and every child whose parents have all succeeded is released
-- (unless its workflow was cancelled). A step whose lease is stale acks nothing, so a step
-- run twice counts once. Rows are locked in one order: messages (the ack), then steps by
-- id, then workflows by id. Returns the ids acked.
CREATE FUNCTION lonnymq_workflow_ack_v1(p_ids bigint[], p_tokens uuid[], p_outputs jsonb[], p_tolerance_ms bigint)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_acked bigint[];
    v_done  bigint[];
    v_ready bigint[];
BEGIN
    IF coalesce(pg_catalog.cardinality(p_outputs), 0) <> coalesce(pg_catalog.cardinality(p_ids), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('outputs', 'must have one output per id', pg_catalog.cardinality(p_outputs)::text);
    END IF;
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    v_acked := lonnymq_ack_v1(p_ids, p_tokens);
    IF pg_catalog.cardinality(v_acked) = 0 THEN
        RETURN v_acked;
    END IF;
    PERFORM 1 FROM lonnymq_workflow_step s
     WHERE s.id = ANY (v_acked)
        OR s.id IN (SELECT e.child_id FROM lonnymq_workflow_edge e WHERE e.parent_id = ANY (v_acked))
     ORDER BY s.id FOR UPDATE;
    WITH done AS (
        UPDATE lonnymq_workflow_step s
           SET state = 'succeeded', output = u.output, finished_at = pg_catalog.now()
          FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_outputs)) AS u(id, output)
         WHERE s.id = u.id AND s.id = ANY (v_acked) AND s.state = 'queued'
        RETURNING s.id
    )
    SELECT pg_catalog.array_agg(d.id) INTO v_done FROM done d;
    IF v_done IS NULL THEN
        RETURN v_acked;
    END IF;
    WITH counted AS (
        SELECT e.child_id, pg_catalog.count(*)::integer AS n
          FROM lonnymq_workflow_edge e WHERE e.parent_id = ANY (v_done) GROUP BY e.child_id
    ), lowered AS (
        UPDATE lonnymq_workflow_step s SET pending = s.pending - c.n
          FROM counted c
         WHERE s.id = c.child_id AND s.state = 'waiting'
        RETURNING s.id, s.pending, s.workflow_id
    )
    SELECT pg_catalog.array_agg(l.id ORDER BY l.id) INTO v_ready
      FROM lowered l JOIN lonnymq_workflow w ON w.id = l.workflow_id
     WHERE l.pending = 0 AND w.state <> 'cancelled';
    PERFORM lonnymq_workflow_release_v1(v_ready, p_tolerance_ms);
    PERFORM 1 FROM lonnymq_workflow w
     WHERE w.id IN (SELECT s.workflow_id FROM lonnymq_workflow_step s WHERE s.id = ANY (v_done))
     ORDER BY w.id FOR NO KEY UPDATE;
    UPDATE lonnymq_workflow w
       SET remaining = w.remaining - d.n,
           state = CASE WHEN w.state = 'running' AND w.remaining = d.n THEN 'succeeded' ELSE w.state END,
           finished_at = CASE WHEN w.state = 'running' AND w.remaining = d.n THEN pg_catalog.now() ELSE w.finished_at END
      FROM (SELECT s.workflow_id, pg_catalog.count(*)::integer AS n FROM lonnymq_workflow_step s
             WHERE s.id = ANY (v_done) GROUP BY s.workflow_id) d
     WHERE w.id = d.workflow_id;
    RETURN v_acked;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Figures counted exactly whatever the backlog (the code moved to lonnymq_queue_stats_v3,
-- exact up to a cap and estimated past it, in 0035)
-- ---------------------------------------------------------------------------------------

-- Superseded by lonnymq_queue_stats_v3 (migration 0035_stats_at_size).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- lonnymq_record_samples_v2 calls it.
-- Exact figures per queue (all queues when p_queues is NULL), as sample rows with id NULL.
-- A paused channel's waiting messages count as paused only: never ready, never scheduled,
-- and never the oldest ready (an operator who pauses a tenant is not alerted by its wait).
-- Cost: ready/scheduled/paused walk the ready index (channel_id, dequeue_at, id) once per
-- channel, i.e. one index entry per waiting message of the queue (index-only when the
-- visibility map allows); in_flight walks the lease index (messages in flight only); dead
-- walks the (queue, died_at) index. No scan of the message table's heap by channel.
-- released_total is the sum of the channel rows' counters, of lonnymq_release_count (a
-- small table) and of the queue's pruned channels (lonnymq_queue_released), so it never falls
-- when a channel is pruned; a queue whose channels were all pruned keeps its row.
CREATE FUNCTION lonnymq_queue_stats_v2(p_queues text[] DEFAULT NULL)
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
               pg_catalog.sum(w.ready) FILTER (WHERE NOT ch.paused) AS ready,
               pg_catalog.sum(w.scheduled) FILTER (WHERE NOT ch.paused) AS scheduled,
               pg_catalog.sum(w.ready + w.scheduled) FILTER (WHERE ch.paused) AS paused,
               pg_catalog.min(w.head) FILTER (WHERE NOT ch.paused) AS head,
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
    ), pruned AS (
        SELECT p.queue, p.released FROM lonnymq_queue_released p
         WHERE p_queues IS NULL OR p.queue = ANY (p_queues)
    ), queues AS (
        SELECT waiting.queue FROM waiting UNION SELECT dead.queue FROM dead
        UNION SELECT pruned.queue FROM pruned
    )
    SELECT NULL::bigint, q.queue, pg_catalog.clock_timestamp(),
           coalesce(w.channels, 0), coalesce(w.paused_channels, 0),
           coalesce(w.ready, 0)::bigint, coalesce(w.scheduled, 0)::bigint,
           coalesce(f.n, 0), coalesce(d.n, 0),
           CASE WHEN w.head <= now_ms.v THEN now_ms.v - w.head END,
           (coalesce(w.released_total, 0::numeric) + coalesce(p.released, 0::bigint)::numeric)::bigint,
           coalesce(w.paused, 0)::bigint
      FROM queues q CROSS JOIN now_ms
      LEFT JOIN waiting w ON w.queue = q.queue
      LEFT JOIN flying f ON f.queue = q.queue
      LEFT JOIN dead d ON d.queue = q.queue
      LEFT JOIN pruned p ON p.queue = q.queue
     ORDER BY q.queue
$$;

-- Superseded by lonnymq_record_samples_v3 (migration 0035_stats_at_size).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- lonnymq_record_samples_due_v1 calls it.
-- Record one sample per queue now (lonnymq_queue_stats_v2's figures: paused apart) and drop
-- samples older than p_keep_ms. Returns the rows recorded.
CREATE FUNCTION lonnymq_record_samples_v2(p_keep_ms bigint DEFAULT 86400000)
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
                                          in_flight, dead, oldest_ready_ms, released_total, paused)
        SELECT x.queue, x.at, x.channels, x.paused_channels, x.ready, x.scheduled,
               x.in_flight, x.dead, x.oldest_ready_ms, x.released_total, x.paused
          FROM lonnymq_queue_stats_v2(NULL::text[]) x
        RETURNING *;
END
$$;

-- Superseded by lonnymq_record_samples_due_v2 (migration 0035_stats_at_size).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- One sample per queue if none was recorded in the last p_interval_ms, by one caller at a
-- time: every worker calls this on its own clock, the first to take the sampler's lock
-- records (lonnymq_record_samples_v2, pruning samples older than p_keep_ms) and the others
-- find the lock taken, or a sample too recent, and record nothing. Any recorder counts
-- (`lonnymq_stats --record` too), so samples are at least p_interval_ms apart. Returns the
-- rows recorded (0: not due, or another caller is recording).
-- The lock: the two-key form with the queue's namespace and key -210, which no channel's key
-- (channel id modulo 2^31-1, never negative) can take (docs/locking.md).
CREATE FUNCTION lonnymq_record_samples_due_v1(p_interval_ms bigint, p_keep_ms bigint)
RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_recorded integer;
BEGIN
    PERFORM lonnymq_check_range_v1('interval', p_interval_ms, 1000::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_range_v1('keep', p_keep_ms, 1::bigint, 31622400000::bigint, false);
    IF NOT pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), -210) THEN
        RETURN 0;
    END IF;
    -- Under the lock, and in a statement that began after the previous holder committed.
    IF EXISTS (SELECT 1 FROM lonnymq_queue_sample s
                WHERE s.at > pg_catalog.clock_timestamp()
                             - pg_catalog.make_interval(secs => p_interval_ms::double precision / 1000::double precision)) THEN
        RETURN 0;
    END IF;
    SELECT pg_catalog.count(*)::integer INTO v_recorded FROM lonnymq_record_samples_v2(p_keep_ms);
    RETURN v_recorded;
END
$$;

-- ---------------------------------------------------------------------------------------
-- A step's inputs (the code moved to _v2 in 0042: bounded, with their size)
-- ---------------------------------------------------------------------------------------

-- Superseded by lonnymq_workflow_inputs_v2 (migration 0042_bounded_outputs).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- What a worker gives a dequeued step's handler: its name, and its parents' outputs by name.
-- VOLATILE, so that called after a dequeue in the same statement it reads with a snapshot of
-- its own, taken after the dequeue's: it sees the ack that released the step (and wrote its
-- last parent's output) even when that ack committed while the statement ran.
CREATE FUNCTION lonnymq_workflow_inputs_v1(p_ids bigint[])
RETURNS TABLE (id bigint, name text, outputs jsonb)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    -- A batch without steps (NULL): nothing to read (plpgsql: its plan is kept per session).
    IF p_ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT s.id, s.name,
           coalesce((SELECT pg_catalog.jsonb_object_agg(p.name, coalesce(p.output, 'null'::jsonb))
                       FROM lonnymq_workflow_step p WHERE p.id = ANY (s.parents)), '{}'::jsonb)
      FROM lonnymq_workflow_step s WHERE s.id = ANY (p_ids);
END
$$;


-- ---------------------------------------------------------------------------------------
-- One message (the SQL callers moved to _v2 in 0044)
-- ---------------------------------------------------------------------------------------

-- Superseded by lonnymq_enqueue_v3 (migration 0049_costs, after _v2 from 0025_dedup_modes; its
-- last callers, the task, schedule and workflow functions, moved to _v2 in 0044_one_single_enqueue).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
CREATE FUNCTION lonnymq_enqueue_v1(
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

-- ---------------------------------------------------------------------------------------
-- Enqueue without a cost (the code moved to enqueue_v3, enqueue_many_v3 and
-- enqueue_keyed_v2 in 0049_costs)
-- ---------------------------------------------------------------------------------------

-- Superseded by lonnymq_enqueue_keyed_v2 (migration 0049_costs).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- A keyed enqueue in mode 'replace' or 'update' (or 'skip', for a batch that mixes modes on
-- its keys): the one place that rule lives, for lonnymq_enqueue_v2 and
-- lonnymq_enqueue_many_v2. The caller has checked the row, holds the channel's shared
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
CREATE FUNCTION lonnymq_enqueue_keyed_v1(
    p_channel_id    bigint,
    p_dedup_key     text,
    p_on_duplicate  text,
    p_new_id        bigint,
    p_payload       jsonb,
    p_dequeue_at    bigint,
    p_priority      integer,
    p_max_attempts  integer,
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
            INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
            VALUES (p_new_id, p_channel_id, p_payload, p_dequeue_at, p_priority, p_max_attempts, p_dedup_key);
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
                   max_attempts = p_max_attempts
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
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
        VALUES (p_new_id, p_channel_id, p_payload, p_dequeue_at, p_priority, p_max_attempts, p_dedup_key);
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

-- Superseded by lonnymq_enqueue_v3 (migration 0049_costs).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- One message with a dedup mode (docs/flow-control.md): the one single enqueue (api.enqueue,
-- a Django Task's message, a schedule's tick, a workflow's on_failure message). p_on_duplicate
-- is 'skip' (the key's first message stands), 'replace' (debounce) or 'update' (throttle); see
-- lonnymq_enqueue_keyed_v1. A mode other than 'skip'
-- needs a dedup key. Returns the id of the message the enqueue created or changed.
CREATE FUNCTION lonnymq_enqueue_v2(
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

-- Superseded by lonnymq_enqueue_many_v4 (migration 0053_slots, after _v3 from 0049_costs).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Many messages of one queue, any channels, in one call. Returns the ids in input order (the
-- existing id where a dedup key repeats, also within the batch). NULL arrays mean "defaults
-- for every row". Channels are created in name order and locked in id order, and dedup keys
-- are claimed in (channel, key) order, so concurrent batches never deadlock, whatever their
-- row order. p_on_duplicate is each row's dedup mode ('skip', 'replace' or 'update'; a NULL
-- array or element: 'skip'). A batch whose rows all skip runs as one set-based statement
-- (lonnymq_enqueue_many_v1's, unchanged). A batch with a 'replace' or 'update' row
-- inserts its keyless rows in that statement and applies its keyed rows through
-- lonnymq_enqueue_keyed_v1 one at a time, in (channel, key, input) order, each with the id
-- drawn for it in input order: the rows of one key behave as that many enqueues in input
-- order would, and every row gets the id of the message its enqueue created or changed.
CREATE FUNCTION lonnymq_enqueue_many_v2(
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
    p_tolerance_ms     bigint    DEFAULT 50
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
    v_k_wake_ids     bigint[] := ARRAY[]::bigint[];
    v_k_wake_ats     bigint[] := ARRAY[]::bigint[];
BEGIN
    IF coalesce(pg_catalog.cardinality(p_channels), 0) <> v_n
       OR (p_run_at_ms IS NOT NULL AND pg_catalog.cardinality(p_run_at_ms) <> v_n)
       OR (p_delay_ms IS NOT NULL AND pg_catalog.cardinality(p_delay_ms) <> v_n)
       OR (p_priorities IS NOT NULL AND pg_catalog.cardinality(p_priorities) <> v_n)
       OR (p_dedup_keys IS NOT NULL AND pg_catalog.cardinality(p_dedup_keys) <> v_n)
       OR (p_on_duplicate IS NOT NULL AND pg_catalog.cardinality(p_on_duplicate) <> v_n)
       OR (p_max_attempts IS NOT NULL AND pg_catalog.cardinality(p_max_attempts) <> v_n) THEN
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
    -- Their keys first (lonnymq_channel_key, since 0059): the key decides who creates a channel.
    PERFORM pg_catalog.set_config('lonnymq.channel_keys', 'written', true);
    WITH created AS (
        INSERT INTO lonnymq_channel_key (queue, name)
        SELECT DISTINCT p_queue, u.name FROM pg_catalog.unnest(p_channels) AS u(name)
         WHERE NOT EXISTS (SELECT 1 FROM lonnymq_channel_key k WHERE k.queue = p_queue AND k.name = u.name)
         ORDER BY 2
        ON CONFLICT (queue, name) DO NOTHING
        RETURNING id, queue, name
    )
    INSERT INTO lonnymq_channel (id, queue, name) SELECT n.id, n.queue, n.name FROM created n ORDER BY n.name;
    PERFORM pg_catalog.set_config('lonnymq.channel_keys', '', true);
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
                       coalesce(u.on_duplicate, 'skip') AS on_duplicate
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
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
        SELECT r.new_id, r.channel_id, r.payload, r.dequeue_at, r.priority, r.max_attempts, r.dedup_key
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
           k.ords, k.channels, k.keys, k.modes, k.new_ids, k.payloads, k.ats, k.priorities, k.attempts
      INTO v_ids, v_row_channels, v_inserted_ids, v_wake_ids, v_wake_ats,
           v_k_ords, v_k_channels, v_k_keys, v_k_modes, v_k_new_ids, v_k_payloads, v_k_ats, v_k_priorities,
           v_k_attempts
      FROM (SELECT pg_catalog.array_agg(k.ord ORDER BY k.channel_id, k.dedup_key, k.ord) AS ords,
                   pg_catalog.array_agg(k.channel_id ORDER BY k.channel_id, k.dedup_key, k.ord) AS channels,
                   pg_catalog.array_agg(k.dedup_key ORDER BY k.channel_id, k.dedup_key, k.ord) AS keys,
                   pg_catalog.array_agg(k.on_duplicate ORDER BY k.channel_id, k.dedup_key, k.ord) AS modes,
                   pg_catalog.array_agg(k.new_id ORDER BY k.channel_id, k.dedup_key, k.ord) AS new_ids,
                   pg_catalog.array_agg(k.payload ORDER BY k.channel_id, k.dedup_key, k.ord) AS payloads,
                   pg_catalog.array_agg(k.dequeue_at ORDER BY k.channel_id, k.dedup_key, k.ord) AS ats,
                   pg_catalog.array_agg(k.priority ORDER BY k.channel_id, k.dedup_key, k.ord) AS priorities,
                   pg_catalog.array_agg(k.max_attempts ORDER BY k.channel_id, k.dedup_key, k.ord) AS attempts
              FROM keyed k) k;

    -- A batch with modes: its keyed rows one at a time, in (channel, key, input) order, so
    -- the rows of one key apply in input order (as that many enqueues would) and concurrent
    -- batches take the keys' locks in one order. Each keeps the id drawn for it above.
    IF v_k_ords IS NOT NULL THEN
        FOR i IN 1 .. pg_catalog.cardinality(v_k_ords) LOOP
            SELECT k.id, k.wake_at INTO v_got
              FROM lonnymq_enqueue_keyed_v1(v_k_channels[i], v_k_keys[i], v_k_modes[i], v_k_new_ids[i],
                                            v_k_payloads[i], v_k_ats[i], v_k_priorities[i], v_k_attempts[i]) k;
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

-- ---------------------------------------------------------------------------------------
-- Publish without a cost (the code moved to publish_v3 in 0051_publish_costs)
-- ---------------------------------------------------------------------------------------

-- Superseded by lonnymq_publish_v4 (migration 0053_slots, after _v3 from 0051_publish_costs).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Publish events to a topic: each event becomes one message in every queue subscribed to it,
-- in the caller's transaction, through lonnymq_enqueue_many_v3 queue by queue in queue-name
-- order (so concurrent publishers take their locks in one order). An event's key names its
-- channel in each queue (NULL: 'default'); p_on_duplicate is each event's dedup mode. Returns
-- one row per subscribed queue, with the message ids in event order; no row when the topic
-- has no subscriber, whose events are counted in lonnymq_unrouted instead (their modes
-- checked all the same).
CREATE FUNCTION lonnymq_publish_v2(
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

-- Superseded by lonnymq_give_back_slots_v2 (migration 0053_slots).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Give back the concurrency slots of leases that took one, locking channels in id order.
-- Notifies when a channel at its cap gets room again.
CREATE FUNCTION lonnymq_give_back_slots_v1(p_channel_ids bigint[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_row    record;
    v_queue  text;
    v_reopen boolean;
BEGIN
    FOR v_row IN
        SELECT u.channel_id, pg_catalog.count(*)::integer AS n FROM pg_catalog.unnest(p_channel_ids) AS u(channel_id)
         GROUP BY u.channel_id ORDER BY u.channel_id
    LOOP
        UPDATE lonnymq_channel c SET in_flight = greatest(c.in_flight - v_row.n, 0)
         WHERE c.id = v_row.channel_id
        RETURNING c.queue,
                  c.max_concurrency IS NOT NULL AND c.in_flight + v_row.n >= c.max_concurrency
                  AND c.next_dequeue_at IS NOT NULL AND NOT c.paused
             INTO v_queue, v_reopen;
        IF v_reopen THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_queue);
        END IF;
    END LOOP;
END
$$;

-- Superseded by lonnymq_give_back_queue_slots_v2 (migration 0053_slots).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Give back the queue-wide slots of leases that took one (p_channel_ids: the channel of each
-- such lease), one queue row at a time in name order. Notifies when a queue at its cap gets
-- room again. Callers hold these leases' message rows (and have given back their channel
-- slots): queue rows are always the last rows a call locks.
CREATE FUNCTION lonnymq_give_back_queue_slots_v1(p_channel_ids bigint[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_row    record;
    v_reopen boolean;
BEGIN
    FOR v_row IN
        SELECT c.queue, pg_catalog.count(*)::integer AS n
          FROM pg_catalog.unnest(p_channel_ids) AS u(channel_id)
          JOIN lonnymq_channel c ON c.id = u.channel_id AND c.id = ANY (p_channel_ids)
         GROUP BY c.queue ORDER BY c.queue
    LOOP
        UPDATE lonnymq_queue_config qc SET in_flight = greatest(qc.in_flight - v_row.n, 0)
         WHERE qc.queue = v_row.queue AND qc.max_concurrency IS NOT NULL
        RETURNING qc.in_flight + v_row.n >= qc.max_concurrency INTO v_reopen;
        IF v_reopen THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_row.queue);
        END IF;
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------------------
-- A plan without strict order (the code moved to configure_plan_v2 in 0052_ordered_plans)
-- ---------------------------------------------------------------------------------------

-- Superseded by lonnymq_configure_plan_v2 (migration 0052_ordered_plans).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Create or change a plan: a NULL limit is left as it is (a new plan starts from the
-- defaults: weight 1, no cap, no interval, no rate); p_unlimited removes the cap, p_no_rate
-- the bucket. Every channel that follows the plan takes the new values of the limits it does
-- not set itself, in one statement (no loop over channels), with what
-- lonnymq_configure_channel_v3 does to one channel:
-- - a channel that gets a cap where it had none counts its leases already running. Before
--   that, the ready messages of those channels are locked: a dequeue leasing them without
--   the channel's row (lonnymq_dequeue_held_v1, which serves only channels without limits)
--   is waited for, and none can start until this commits (it skips locked messages), so no
--   lease escapes the count;
-- - the channel rows are locked in id order (the order acks give slots back in), then
--   written; a new weight starts a new round, a new or changed rate a full bucket, and a
--   shorter interval or a bucket removed may bring the next turn earlier.
-- The plan's row is locked first (channel creation and configure_channel read it FOR SHARE,
-- before the channel's row). Returns how many channels changed.
CREATE FUNCTION lonnymq_configure_plan_v1(
    p_name text, p_weight integer DEFAULT NULL, p_max_concurrency integer DEFAULT NULL,
    p_unlimited boolean DEFAULT false, p_release_interval_ms bigint DEFAULT NULL,
    p_rate_count integer DEFAULT NULL, p_rate_period_ms bigint DEFAULT NULL, p_rate_burst integer DEFAULT NULL,
    p_no_rate boolean DEFAULT false
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
BEGIN
    PERFORM lonnymq_check_plan_name_v1(p_name);
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

    INSERT INTO lonnymq_plan (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING;
    SELECT * INTO v_plan FROM lonnymq_plan p WHERE p.name = p_name FOR NO KEY UPDATE;
    UPDATE lonnymq_plan p
       SET weight = coalesce(p_weight, p.weight),
           max_concurrency = CASE WHEN coalesce(p_unlimited, false) THEN NULL
                                  ELSE coalesce(p_max_concurrency, p.max_concurrency) END,
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
            RETURNING m.channel_id
        )
        SELECT pg_catalog.array_agg(x.channel_id), pg_catalog.array_agg(x.n)
          INTO v_claim_ids, v_claim_counts
          FROM (SELECT cl.channel_id, pg_catalog.count(*)::integer AS n FROM claimed cl GROUP BY cl.channel_id) x;
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
          -- changed or removed (a cap or a weight does not move it).
          LEFT JOIN LATERAL (
              SELECT mm.dequeue_at FROM lonnymq_message mm
               WHERE mm.channel_id = t.id AND mm.lease_until IS NULL
                 AND (t.release_interval_ms < t.old_release_interval_ms
                      OR (t.rate_count, t.rate_period_ms, t.rate_burst)
                         IS DISTINCT FROM (t.old_rate_count, t.old_rate_period_ms, t.old_rate_burst))
               ORDER BY mm.dequeue_at, mm.id LIMIT 1
          ) h ON true
         WHERE (t.weight, t.max_concurrency, t.release_interval_ms, t.rate_count, t.rate_period_ms, t.rate_burst)
               IS DISTINCT FROM (t.old_weight, t.old_max_concurrency, t.old_release_interval_ms, t.old_rate_count,
                                 t.old_rate_period_ms, t.old_rate_burst)
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

-- Superseded by lonnymq_publish_v4 (migration 0053_slots).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- Publish events to a topic: each event becomes one message in every queue subscribed to it,
-- in the caller's transaction, through lonnymq_enqueue_many_v3 queue by queue in queue-name
-- order (so concurrent publishers take their locks in one order). An event's key names its
-- channel in each queue (NULL: 'default'); p_on_duplicate is each event's dedup mode; p_costs
-- each event's cost in every queue (NULL array or element: 1; a cost past one queue's bucket
-- refuses the whole publish: lonnymq_check_costs_v1). Returns one row per subscribed queue,
-- with the message ids in event order; no row when the topic has no subscriber, whose events
-- are counted in lonnymq_unrouted instead (their modes and costs checked all the same).
CREATE FUNCTION lonnymq_publish_v3(
    p_topic                text,
    p_keys                 text[],
    p_payloads             jsonb[],
    p_run_at_ms            bigint[]  DEFAULT NULL,
    p_dedup_keys           text[]    DEFAULT NULL,
    p_on_duplicate         text[]    DEFAULT NULL,
    p_default_max_attempts integer   DEFAULT 5,
    p_priority_step_ms     bigint    DEFAULT 1000,
    p_tolerance_ms         bigint    DEFAULT 50,
    p_costs                integer[] DEFAULT NULL
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
       OR (p_costs IS NOT NULL AND pg_catalog.cardinality(p_costs) <> v_n) THEN
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
                                       p_default_max_attempts, p_priority_step_ms, p_tolerance_ms, p_costs);
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
        INSERT INTO lonnymq_unrouted AS r (topic, events, last_published_at)
        VALUES (p_topic, v_n::bigint, pg_catalog.now())
        ON CONFLICT (topic) DO UPDATE
           SET events = r.events + EXCLUDED.events, last_published_at = EXCLUDED.last_published_at;
    END IF;
END
$$;

-- Superseded by lonnymq_enqueue_many_v4 (migration 0053_slots).
-- Kept for rolling deploys from 0.1.x; may be dropped in 0.3.0.
-- lonnymq_enqueue_many_v4 at one slot per message: what the previous release's enqueue_many
-- statement and lonnymq_publish_v3 call.
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
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT lonnymq_enqueue_many_v4(p_queue, p_channels, p_payloads, p_run_at_ms, p_delay_ms, p_priorities, p_dedup_keys,
                                   p_on_duplicate, p_max_attempts, p_default_max_attempts, p_priority_step_ms,
                                   p_tolerance_ms, p_costs, NULL::integer[])
$$;
