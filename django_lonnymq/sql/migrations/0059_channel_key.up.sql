-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0059: a channel's identity moves to lonnymq_channel_key (id, queue, name),
-- a row written once, which holds the unique (queue, name) and the id dead messages refer
-- to; lonnymq_channel keeps plain indexes on id and (queue, name). Every dequeue's visit
-- rewrites a channel's row, and under a held snapshot each new version's entries in a unique
-- index were checked against every version the snapshot keeps. The functions that create
-- channels write the key first (ON CONFLICT on its (queue, name)), then the channel with the
-- key's id; a trigger writes it for any other insert, and a deleted or truncated channel
-- takes its key with it.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

CREATE TABLE lonnymq_channel_key (
    id     bigint NOT NULL DEFAULT pg_catalog.nextval('lonnymq_channel_id_seq'::regclass) PRIMARY KEY,
    queue  text   NOT NULL,
    name   text   NOT NULL,
    CONSTRAINT lonnymq_channel_key_queue_name_uniq UNIQUE (queue, name)
);
INSERT INTO lonnymq_channel_key (id, queue, name) SELECT c.id, c.queue, c.name FROM lonnymq_channel c;

ALTER TABLE lonnymq_dead_message DROP CONSTRAINT lonnymq_dead_message_channel_id_fkey;
ALTER TABLE lonnymq_dead_message ADD CONSTRAINT lonnymq_dead_message_channel_id_fkey
    FOREIGN KEY (channel_id) REFERENCES lonnymq_channel_key (id) ON DELETE SET NULL;
ALTER TABLE lonnymq_channel DROP CONSTRAINT lonnymq_channel_queue_name_uniq,
                            DROP CONSTRAINT lonnymq_channel_pkey;
CREATE INDEX lonnymq_channel_id_idx ON lonnymq_channel (id);
CREATE INDEX lonnymq_channel_queue_name_idx ON lonnymq_channel (queue, name);
ALTER TABLE lonnymq_channel ALTER COLUMN id SET (n_distinct = -1);

CREATE FUNCTION lonnymq_channel_key_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO lonnymq_channel_key (id, queue, name) VALUES (NEW.id, NEW.queue, NEW.name)
        ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM lonnymq_channel_key k
                                  WHERE k.id = NEW.id AND k.queue = NEW.queue AND k.name = NEW.name) THEN
        RAISE EXCEPTION 'channel id % belongs to another channel than %/%', NEW.id, NEW.queue, NEW.name
            USING ERRCODE = 'unique_violation', TABLE = 'lonnymq_channel_key';
    END IF;
    RETURN NEW;
END
$$;
CREATE FUNCTION lonnymq_channel_gone_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        -- A DELETE: a TRUNCATE here fails while dead messages refer to the keys.
        DELETE FROM lonnymq_channel_key;
    ELSE
        DELETE FROM lonnymq_channel_key k USING gone g WHERE k.id = g.id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER lonnymq_channel_key BEFORE INSERT ON lonnymq_channel
    FOR EACH ROW WHEN (pg_catalog.current_setting('lonnymq.channel_keys', true) IS DISTINCT FROM 'written')
    EXECUTE FUNCTION lonnymq_channel_key_v1();
CREATE TRIGGER lonnymq_channel_gone AFTER DELETE ON lonnymq_channel
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION lonnymq_channel_gone_v1();
CREATE TRIGGER lonnymq_channel_truncated AFTER TRUNCATE ON lonnymq_channel
    FOR EACH STATEMENT EXECUTE FUNCTION lonnymq_channel_gone_v1();

CREATE OR REPLACE FUNCTION lonnymq_channel_id_v1(p_queue text, p_channel text) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_id bigint;
BEGIN
    SELECT k.id INTO v_id FROM lonnymq_channel_key k WHERE k.queue = p_queue AND k.name = p_channel;
    IF v_id IS NULL THEN
        PERFORM lonnymq_check_names_v1(p_queue, p_channel);
        -- The key first: of two concurrent first enqueues, the one whose key goes in creates it.
        INSERT INTO lonnymq_channel_key (queue, name) VALUES (p_queue, p_channel)
            ON CONFLICT (queue, name) DO NOTHING
            RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            PERFORM pg_catalog.set_config('lonnymq.channel_keys', 'written', true);
            INSERT INTO lonnymq_channel (id, queue, name) VALUES (v_id, p_queue, p_channel);
            PERFORM pg_catalog.set_config('lonnymq.channel_keys', '', true);
        ELSE
            SELECT k.id INTO v_id FROM lonnymq_channel_key k WHERE k.queue = p_queue AND k.name = p_channel;
        END IF;
        IF v_id IS NULL THEN
            RAISE EXCEPTION 'channel %/% was created concurrently; retry the transaction', p_queue, p_channel
                USING ERRCODE = '40001';
        END IF;
    END IF;
    RETURN v_id;
END
$$;
CREATE OR REPLACE FUNCTION lonnymq_enqueue_many_v4(
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
SET jit = off
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

    -- Every channel's id, from its key (one row version, however many a held snapshot keeps
    -- of the channel's row); then the missing ones, in name order: their keys first (the key
    -- decides who creates a channel), then their rows, which the setting tells the key's
    -- trigger are keyed (lonnymq_channel_key_v1); then every channel's shared lock in id order
    -- ("an enqueue into this channel is in flight"). The lookup is a join: "name = ANY
    -- (array)" would, in the generic plan, test every channel of the queue against the whole
    -- batch.
    FOR i IN 1 .. 2 LOOP
        SELECT pg_catalog.array_agg(c.id ORDER BY c.id) FILTER (WHERE c.id IS NOT NULL),
               pg_catalog.array_agg(c.name ORDER BY c.id) FILTER (WHERE c.id IS NOT NULL),
               pg_catalog.count(*) - pg_catalog.count(c.id)
          INTO v_channel_ids, v_channel_names, v_missing
          FROM (SELECT DISTINCT u.name FROM pg_catalog.unnest(p_channels) AS u(name)) u
          LEFT JOIN lonnymq_channel_key c ON c.queue = p_queue AND c.name = u.name;
        EXIT WHEN v_missing = 0;
        IF i = 2 THEN
            RAISE EXCEPTION 'a channel of queue % was created concurrently; retry the transaction', p_queue
                USING ERRCODE = '40001';
        END IF;
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
    END LOOP;
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
CREATE OR REPLACE FUNCTION lonnymq_check_v2(p_grace_ms bigint DEFAULT 1000)
RETURNS TABLE (channel_id bigint, queue text, channel text, problem text, detail text)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET jit = off
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
         WHERE NOT EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.id = o.channel_id)
        UNION ALL
        SELECT coalesce(c.id, k.id), coalesce(c.queue, k.queue), coalesce(c.name, k.name), 'channel_key_mismatch',
               CASE WHEN k.id IS NULL THEN 'the channel has no row in lonnymq_channel_key'
                    WHEN c.id IS NULL THEN 'a row of lonnymq_channel_key without its channel'
                    WHEN c.n > 1 THEN pg_catalog.format('%s channel rows have this id', c.n)
                    ELSE pg_catalog.format('its key names %s/%s', k.queue, k.name) END
          FROM (SELECT c.id, pg_catalog.min(c.queue) AS queue, pg_catalog.min(c.name) AS name,
                       pg_catalog.count(*) AS n
                  FROM lonnymq_channel c GROUP BY c.id) c
          FULL JOIN lonnymq_channel_key k ON k.id = c.id
         WHERE c.id IS NULL OR k.id IS NULL OR c.n > 1 OR c.queue <> k.queue OR c.name <> k.name;
END
$$;
CREATE OR REPLACE FUNCTION lonnymq_enqueue_many_v1(
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
CREATE OR REPLACE FUNCTION lonnymq_enqueue_many_v2(
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

-- The other functions that read channels by id: no JIT (see lonnymq_channel in ../schema.sql).
ALTER FUNCTION lonnymq_mark_v1 SET jit = off;
ALTER FUNCTION lonnymq_mark_many_v1 SET jit = off;
ALTER FUNCTION lonnymq_apply_marks_v1 SET jit = off;
ALTER FUNCTION lonnymq_hold_channels_v1 SET jit = off;
ALTER FUNCTION lonnymq_check_costs_v1 SET jit = off;
ALTER FUNCTION lonnymq_check_slots_v1 SET jit = off;
ALTER FUNCTION lonnymq_enqueue_v4 SET jit = off;
ALTER FUNCTION lonnymq_enqueue_task_keyed_v1 SET jit = off;
ALTER FUNCTION lonnymq_next_due_v1 SET jit = off;
ALTER FUNCTION lonnymq_give_back_slots_v2 SET jit = off;
ALTER FUNCTION lonnymq_give_back_queue_slots_v2 SET jit = off;
ALTER FUNCTION lonnymq_reap_v1 SET jit = off;
ALTER FUNCTION lonnymq_requeue_dead_v1 SET jit = off;
ALTER FUNCTION lonnymq_lift_holds_v1 SET jit = off;
ALTER FUNCTION lonnymq_run_now_v1 SET jit = off;
ALTER FUNCTION lonnymq_configure_channel_v3 SET jit = off;
ALTER FUNCTION lonnymq_delete_plan_v1 SET jit = off;
ALTER FUNCTION lonnymq_configure_channel_v4 SET jit = off;
ALTER FUNCTION lonnymq_configure_queue_v1 SET jit = off;
ALTER FUNCTION lonnymq_delete_channel_v1 SET jit = off;
ALTER FUNCTION lonnymq_prune_channels_v1 SET jit = off;
ALTER FUNCTION lonnymq_check_limits_v2 SET jit = off;
ALTER FUNCTION lonnymq_emit_event_v1 SET jit = off;
ALTER FUNCTION lonnymq_consume_v1 SET jit = off;
ALTER FUNCTION lonnymq_order_channel_v1 SET jit = off;
ALTER FUNCTION lonnymq_unblock_channel_v1 SET jit = off;
