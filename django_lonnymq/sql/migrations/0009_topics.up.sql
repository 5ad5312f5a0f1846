-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0009: topics with consumer groups. lonnymq_subscription (topic, queue)
-- rows, lonnymq_unrouted counters, lonnymq_publish_v1 (one message per subscribed queue, in
-- the caller's transaction) and lonnymq_subscribe_v1.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- A consumer group: the queue that receives its own copy of every message published to the
-- topic (its own deliveries, retries and dead letters). Edited in the admin, or declared in
-- code with subscribe(topic, queue=...) and written when a worker starts.
CREATE TABLE lonnymq_subscription (
    id          bigserial   PRIMARY KEY,
    topic       text        NOT NULL,
    queue       text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lonnymq_subscription_topic_queue_uniq UNIQUE (topic, queue),
    CONSTRAINT lonnymq_subscription_topic_length CHECK (char_length(topic) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_subscription_topic_not_blank CHECK (topic ~ '\S'),
    CONSTRAINT lonnymq_subscription_queue_length CHECK (char_length(queue) BETWEEN 1 AND 100),
    CONSTRAINT lonnymq_subscription_queue_not_blank CHECK (queue ~ '\S')
);

-- Events published to a topic that had no subscriber then: counted here, one row per topic
-- (nothing else is written for them). Only such publishes touch this row, so publishing to
-- a subscribed topic never waits on it.
CREATE TABLE lonnymq_unrouted (
    topic            text        PRIMARY KEY,
    events           bigint      NOT NULL DEFAULT 0,
    last_published_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lonnymq_unrouted_topic_length CHECK (char_length(topic) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_unrouted_events_nonnegative CHECK (events >= 0)
);

-- Topic names: 1 to 200 characters, not only blanks.
CREATE FUNCTION lonnymq_check_topic_v1(p_topic text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_topic IS NULL OR pg_catalog.char_length(p_topic) NOT BETWEEN 1 AND 200 OR p_topic !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('topic', 'must be 1 to 200 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_topic));
    END IF;
END
$$;

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

-- Write subscriptions (the code-declared ones, at worker start): missing pairs are created,
-- existing ones left alone. Returns how many were created.
CREATE FUNCTION lonnymq_subscribe_v1(p_topics text[], p_queues text[]) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_bad     record;
    v_created integer;
BEGIN
    IF coalesce(pg_catalog.cardinality(p_topics), 0) <> coalesce(pg_catalog.cardinality(p_queues), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('subscriptions', 'topics and queues must have the same length', NULL);
    END IF;
    PERFORM lonnymq_check_list_v1('topics', pg_catalog.array_ndims(p_topics));
    PERFORM lonnymq_check_list_v1('queues', pg_catalog.array_ndims(p_queues));
    FOR v_bad IN SELECT u.t, u.q FROM ROWS FROM (pg_catalog.unnest(p_topics), pg_catalog.unnest(p_queues)) AS u(t, q) LOOP
        PERFORM lonnymq_check_topic_v1(v_bad.t);
        PERFORM lonnymq_check_names_v1(v_bad.q, 'default'::text);
    END LOOP;
    INSERT INTO lonnymq_subscription (topic, queue)
    SELECT DISTINCT u.t, u.q FROM ROWS FROM (pg_catalog.unnest(p_topics), pg_catalog.unnest(p_queues)) AS u(t, q)
     ORDER BY 1, 2
    ON CONFLICT (topic, queue) DO NOTHING;
    GET DIAGNOSTICS v_created = ROW_COUNT;
    RETURN v_created;
END
$$;
