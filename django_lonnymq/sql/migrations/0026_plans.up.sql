-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0026: plans, named sets of limits (pricing tiers).
-- - lonnymq_plan (new): a plan's weight, cap, release interval and rate.
-- - lonnymq_queue_plan (new): the plan a queue's new channels follow.
-- - lonnymq_channel: plan_id (the plan it follows), own_weight, own_max_concurrency,
--   own_release_interval, own_rate (the limits it sets itself; the limits channels have
--   when this runs are marked their own where they are not the default).
-- - lonnymq_channel_plan_v1 (new), trigger lonnymq_channel_plan: a new channel takes its
--   queue's default plan and the plan's limits.
-- - lonnymq_configure_plan_v1, lonnymq_delete_plan_v1, lonnymq_set_default_plan_v1,
--   lonnymq_configure_channel_v4, lonnymq_check_limits_v1 and their helpers (new).
--   lonnymq_configure_channel_v3 is unchanged (v4 calls it).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- Plans: named sets of limits (pricing tiers). A channel that follows a plan takes the plan's
-- value for every limit it has not set itself (own_* false); a channel without a plan takes
-- the defaults (weight 1, no cap, no release interval, no rate). The effective values live
-- on the channel row, the columns lonnymq_dequeue_v1 reads, so a dequeue never looks at a
-- plan: lonnymq_configure_plan_v1 writes a plan's change to all its channels in one
-- statement, and lonnymq_check_limits_v1 proves none has drifted.
CREATE TABLE lonnymq_plan (
    id                  bigserial   PRIMARY KEY,
    name                text        NOT NULL,
    weight              integer     NOT NULL DEFAULT 1,
    max_concurrency     integer     NULL,
    release_interval_ms bigint      NOT NULL DEFAULT 0,
    rate_count          integer     NULL,
    rate_period_ms      bigint      NULL,
    rate_burst          integer     NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lonnymq_plan_name_uniq UNIQUE (name),
    CONSTRAINT lonnymq_plan_name_length CHECK (char_length(name) BETWEEN 1 AND 100),
    CONSTRAINT lonnymq_plan_name_not_blank CHECK (name ~ '\S'),
    CONSTRAINT lonnymq_plan_weight_range CHECK (weight BETWEEN 1 AND 1000),
    CONSTRAINT lonnymq_plan_max_concurrency_positive CHECK (max_concurrency IS NULL OR max_concurrency > 0),
    CONSTRAINT lonnymq_plan_release_interval_range CHECK (release_interval_ms BETWEEN 0 AND 31622400000),
    CONSTRAINT lonnymq_plan_rate_complete
        CHECK ((rate_count IS NULL) = (rate_period_ms IS NULL) AND (rate_count IS NULL) = (rate_burst IS NULL)),
    CONSTRAINT lonnymq_plan_rate_count_range CHECK (rate_count BETWEEN 1 AND 1000000),
    CONSTRAINT lonnymq_plan_rate_period_range CHECK (rate_period_ms BETWEEN 1 AND 31622400000),
    CONSTRAINT lonnymq_plan_rate_burst_range CHECK (rate_burst BETWEEN 1 AND 1000000)
);

-- The plan a queue's new channels follow (configure_queue(default_plan=...)). A table of its
-- own, not lonnymq_queue_config: a queue with a row there has every dequeue lock that row.
CREATE TABLE lonnymq_queue_plan (
    queue      text        PRIMARY KEY,
    plan_id    bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lonnymq_queue_plan_plan_fk FOREIGN KEY (plan_id) REFERENCES lonnymq_plan (id),
    CONSTRAINT lonnymq_queue_plan_queue_length CHECK (char_length(queue) BETWEEN 1 AND 100),
    CONSTRAINT lonnymq_queue_plan_queue_not_blank CHECK (queue ~ '\S')
);
CREATE INDEX lonnymq_queue_plan_plan_idx ON lonnymq_queue_plan (plan_id);

ALTER TABLE lonnymq_channel
    ADD COLUMN plan_id bigint NULL,
    ADD COLUMN own_weight boolean NOT NULL DEFAULT false,
    ADD COLUMN own_max_concurrency boolean NOT NULL DEFAULT false,
    ADD COLUMN own_release_interval boolean NOT NULL DEFAULT false,
    ADD COLUMN own_rate boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT lonnymq_channel_plan_fk FOREIGN KEY (plan_id) REFERENCES lonnymq_plan (id);
CREATE INDEX lonnymq_channel_plan_idx ON lonnymq_channel (plan_id, id) WHERE plan_id IS NOT NULL;
-- The limits channels have today were set through configure_channel: they are their own.
UPDATE lonnymq_channel
   SET own_weight = weight <> 1,
       own_max_concurrency = max_concurrency IS NOT NULL,
       own_release_interval = release_interval_ms <> 0,
       own_rate = rate_count IS NOT NULL
 WHERE weight <> 1 OR max_concurrency IS NOT NULL OR release_interval_ms <> 0 OR rate_count IS NOT NULL;

-- A plan name that names no plan: LQ260, worded like an invalid argument (field plan).
CREATE FUNCTION lonnymq_raise_unknown_plan_v1(p_name text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RAISE EXCEPTION 'plan must name an existing plan (configure_plan creates one), got %',
                    pg_catalog.quote_nullable(p_name)
        USING ERRCODE = 'LQ260', COLUMN = 'plan';
END
$$;

-- Plan names: 1 to 100 characters, not only blanks.
CREATE FUNCTION lonnymq_check_plan_name_v1(p_name text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_name IS NULL OR pg_catalog.char_length(p_name) NOT BETWEEN 1 AND 100 OR p_name !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('plan', 'must be 1 to 100 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_name));
    END IF;
END
$$;

-- A new channel follows its queue's default plan (lonnymq_queue_plan) unless it names one,
-- and takes the plan's value of every limit it does not set itself. A BEFORE INSERT trigger:
-- it runs when a channel is created (by an enqueue, a publish, a requeue or configure_channel),
-- never on the rows a dequeue or an ack writes. The plan's row is read FOR SHARE, so a
-- concurrent change of the plan either waits for this transaction (and then rewrites the new
-- channel with the others) or committed before and is read here.
CREATE FUNCTION lonnymq_channel_plan_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_plan lonnymq_plan%ROWTYPE;
BEGIN
    IF NEW.plan_id IS NULL THEN
        SELECT qp.plan_id INTO NEW.plan_id FROM lonnymq_queue_plan qp WHERE qp.queue = NEW.queue;
    END IF;
    IF NEW.plan_id IS NOT NULL THEN
        SELECT * INTO v_plan FROM lonnymq_plan p WHERE p.id = NEW.plan_id FOR SHARE;
        IF NOT NEW.own_weight THEN
            NEW.weight := v_plan.weight;
        END IF;
        IF NOT NEW.own_max_concurrency THEN
            NEW.max_concurrency := v_plan.max_concurrency;
        END IF;
        IF NOT NEW.own_release_interval THEN
            NEW.release_interval_ms := v_plan.release_interval_ms;
        END IF;
        IF NOT NEW.own_rate THEN
            NEW.rate_count := v_plan.rate_count;
            NEW.rate_period_ms := v_plan.rate_period_ms;
            NEW.rate_burst := v_plan.rate_burst;
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER lonnymq_channel_plan BEFORE INSERT ON lonnymq_channel
    FOR EACH ROW EXECUTE FUNCTION lonnymq_channel_plan_v1();

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

-- Delete a plan no channel follows and no queue gives its new channels. A plan in use is
-- refused (LQ261, DETAIL: "channels,queues"), an unknown one too (LQ260). The row is locked
-- FOR UPDATE first: a channel being given the plan meanwhile (its foreign key check locks
-- the row) is waited for and counted.
CREATE FUNCTION lonnymq_delete_plan_v1(p_name text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id       bigint;
    v_channels bigint;
    v_queues   bigint;
BEGIN
    PERFORM lonnymq_check_plan_name_v1(p_name);
    SELECT p.id INTO v_id FROM lonnymq_plan p WHERE p.name = p_name FOR UPDATE;
    IF v_id IS NULL THEN
        PERFORM lonnymq_raise_unknown_plan_v1(p_name);
    END IF;
    SELECT pg_catalog.count(*) INTO v_channels FROM lonnymq_channel c WHERE c.plan_id = v_id;
    SELECT pg_catalog.count(*) INTO v_queues FROM lonnymq_queue_plan qp WHERE qp.plan_id = v_id;
    IF v_channels > 0 OR v_queues > 0 THEN
        RAISE EXCEPTION 'plan % is in use: % channel(s) follow it and % queue(s) give it to their new channels',
                        pg_catalog.quote_literal(p_name), v_channels, v_queues
            USING ERRCODE = 'LQ261', DETAIL = pg_catalog.format('%s,%s', v_channels, v_queues);
    END IF;
    DELETE FROM lonnymq_plan p WHERE p.id = v_id;
END
$$;

-- The plan a queue's new channels follow (p_plan NULL: none). Channels that exist keep theirs.
CREATE FUNCTION lonnymq_set_default_plan_v1(p_queue text, p_plan text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
BEGIN
    IF p_queue IS NULL OR pg_catalog.char_length(p_queue) NOT BETWEEN 1 AND 100 OR p_queue !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('queue', 'must be 1 to 100 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_queue));
    END IF;
    IF p_plan IS NULL THEN
        DELETE FROM lonnymq_queue_plan qp WHERE qp.queue = p_queue;
        RETURN;
    END IF;
    PERFORM lonnymq_check_plan_name_v1(p_plan);
    SELECT p.id INTO v_id FROM lonnymq_plan p WHERE p.name = p_plan FOR KEY SHARE;
    IF v_id IS NULL THEN
        PERFORM lonnymq_raise_unknown_plan_v1(p_plan);
    END IF;
    INSERT INTO lonnymq_queue_plan AS qp (queue, plan_id) VALUES (p_queue, v_id)
    ON CONFLICT (queue) DO UPDATE SET plan_id = excluded.plan_id, updated_at = pg_catalog.now();
END
$$;

-- configure_channel with plans: what lonnymq_configure_channel_v3 does (a NULL limit is left
-- as it is, the call's limits are written under the channel's row lock), and
-- - a limit the call sets becomes the channel's own: no plan change touches it;
-- - p_inherit names limits that follow the plan (or the defaults) again: weight,
--   max_concurrency, release_interval, rate;
-- - p_plan: the channel follows that plan (LQ260 when there is none); p_no_plan: no plan.
-- Every limit that is not the channel's own then takes the plan's value (or the default),
-- written through lonnymq_configure_channel_v3, so a cap set counts the running leases and a
-- new rate starts with a full bucket, as there. The plan's row is read FOR SHARE before the
-- channel's row is locked (the order lonnymq_configure_plan_v1 takes them in).
CREATE FUNCTION lonnymq_configure_channel_v4(
    p_queue text, p_channel text, p_max_concurrency integer DEFAULT NULL, p_unlimited boolean DEFAULT false,
    p_release_interval_ms bigint DEFAULT NULL, p_paused boolean DEFAULT NULL, p_weight integer DEFAULT NULL,
    p_rate_count integer DEFAULT NULL, p_rate_period_ms bigint DEFAULT NULL, p_rate_burst integer DEFAULT NULL,
    p_no_rate boolean DEFAULT false, p_plan text DEFAULT NULL, p_no_plan boolean DEFAULT false,
    p_inherit text[] DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id           bigint;
    v_ch           lonnymq_channel%ROWTYPE;
    v_plan         lonnymq_plan%ROWTYPE;
    v_inherit      text[] := coalesce(p_inherit, ARRAY[]::text[]);
    v_set_weight   boolean := p_weight IS NOT NULL;
    v_set_cap      boolean := p_max_concurrency IS NOT NULL OR coalesce(p_unlimited, false);
    v_set_interval boolean := p_release_interval_ms IS NOT NULL;
    v_set_rate     boolean := p_rate_count IS NOT NULL OR p_rate_period_ms IS NOT NULL OR p_rate_burst IS NOT NULL
                              OR coalesce(p_no_rate, false);
    v_own_weight   boolean;
    v_own_cap      boolean;
    v_own_interval boolean;
    v_own_rate     boolean;
    v_weight       integer;
    v_cap          integer;
    v_interval     bigint;
    v_rate_count   integer;
    v_rate_period  bigint;
    v_rate_burst   integer;
    v_bad          text;
BEGIN
    PERFORM lonnymq_check_list_v1('inherit', pg_catalog.array_ndims(p_inherit));
    SELECT u.x INTO v_bad FROM pg_catalog.unnest(v_inherit) AS u(x)
     WHERE u.x IS NULL OR u.x NOT IN ('weight', 'max_concurrency', 'release_interval', 'rate') LIMIT 1;
    IF FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('inherit', 'must name weight, max_concurrency, release_interval or rate',
                                         pg_catalog.quote_nullable(v_bad));
    END IF;
    SELECT u.x INTO v_bad FROM pg_catalog.unnest(v_inherit) AS u(x)
     WHERE (u.x = 'weight' AND v_set_weight) OR (u.x = 'max_concurrency' AND v_set_cap)
        OR (u.x = 'release_interval' AND v_set_interval) OR (u.x = 'rate' AND v_set_rate) LIMIT 1;
    IF FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('inherit', 'cannot name a limit the call also sets', v_bad);
    END IF;
    IF p_plan IS NOT NULL AND coalesce(p_no_plan, false) THEN
        PERFORM lonnymq_raise_invalid_v1('plan', 'cannot be combined with no_plan', pg_catalog.quote_literal(p_plan));
    END IF;
    PERFORM lonnymq_check_names_v1(p_queue, p_channel);
    IF p_plan IS NOT NULL THEN
        PERFORM lonnymq_check_plan_name_v1(p_plan);
        SELECT * INTO v_plan FROM lonnymq_plan p WHERE p.name = p_plan FOR SHARE;
        IF NOT FOUND THEN
            PERFORM lonnymq_raise_unknown_plan_v1(p_plan);
        END IF;
    ELSIF NOT coalesce(p_no_plan, false) THEN
        SELECT p.* INTO v_plan FROM lonnymq_channel c JOIN lonnymq_plan p ON p.id = c.plan_id
         WHERE c.queue = p_queue AND c.name = p_channel
           FOR SHARE OF p;
    END IF;

    -- The call's own limits (and the pause), with v3's checks; creates the channel if need be
    -- (then with its queue's default plan) and leaves its row locked.
    v_id := lonnymq_configure_channel_v3(p_queue, p_channel, p_max_concurrency, p_unlimited, p_release_interval_ms,
                                         p_paused, p_weight, p_rate_count, p_rate_period_ms, p_rate_burst, p_no_rate);
    SELECT * INTO v_ch FROM lonnymq_channel c WHERE c.id = v_id;
    IF p_plan IS NULL AND NOT coalesce(p_no_plan, false) AND v_ch.plan_id IS DISTINCT FROM v_plan.id THEN
        -- Created just now with its queue's default plan, or given another plan meanwhile.
        SELECT * INTO v_plan FROM lonnymq_plan p WHERE p.id = v_ch.plan_id FOR SHARE;
    END IF;

    v_own_weight := CASE WHEN 'weight' = ANY (v_inherit) THEN false WHEN v_set_weight THEN true ELSE v_ch.own_weight END;
    v_own_cap := CASE WHEN 'max_concurrency' = ANY (v_inherit) THEN false WHEN v_set_cap THEN true
                      ELSE v_ch.own_max_concurrency END;
    v_own_interval := CASE WHEN 'release_interval' = ANY (v_inherit) THEN false WHEN v_set_interval THEN true
                           ELSE v_ch.own_release_interval END;
    v_own_rate := CASE WHEN 'rate' = ANY (v_inherit) THEN false WHEN v_set_rate THEN true ELSE v_ch.own_rate END;
    -- v_plan is all NULL without a plan: the defaults.
    v_weight := CASE WHEN v_own_weight THEN v_ch.weight ELSE coalesce(v_plan.weight, 1) END;
    v_cap := CASE WHEN v_own_cap THEN v_ch.max_concurrency ELSE v_plan.max_concurrency END;
    v_interval := CASE WHEN v_own_interval THEN v_ch.release_interval_ms ELSE coalesce(v_plan.release_interval_ms, 0) END;
    v_rate_count := CASE WHEN v_own_rate THEN v_ch.rate_count ELSE v_plan.rate_count END;
    v_rate_period := CASE WHEN v_own_rate THEN v_ch.rate_period_ms ELSE v_plan.rate_period_ms END;
    v_rate_burst := CASE WHEN v_own_rate THEN v_ch.rate_burst ELSE v_plan.rate_burst END;

    UPDATE lonnymq_channel c
       SET plan_id = v_plan.id,
           own_weight = v_own_weight,
           own_max_concurrency = v_own_cap,
           own_release_interval = v_own_interval,
           own_rate = v_own_rate
     WHERE c.id = v_id
       AND (c.plan_id, c.own_weight, c.own_max_concurrency, c.own_release_interval, c.own_rate)
           IS DISTINCT FROM (v_plan.id, v_own_weight, v_own_cap, v_own_interval, v_own_rate);
    IF (v_weight, v_cap, v_interval, v_rate_count, v_rate_period, v_rate_burst)
       IS DISTINCT FROM (v_ch.weight, v_ch.max_concurrency, v_ch.release_interval_ms, v_ch.rate_count,
                         v_ch.rate_period_ms, v_ch.rate_burst) THEN
        -- The limits that follow the plan (or the defaults) and differ: only those, so an
        -- unchanged rate keeps its bucket.
        PERFORM lonnymq_configure_channel_v3(
            p_queue, p_channel,
            CASE WHEN v_cap IS DISTINCT FROM v_ch.max_concurrency THEN v_cap END,
            v_cap IS NULL AND v_ch.max_concurrency IS NOT NULL,
            CASE WHEN v_interval <> v_ch.release_interval_ms THEN v_interval END,
            NULL::boolean,
            CASE WHEN v_weight <> v_ch.weight THEN v_weight END,
            CASE WHEN (v_rate_count, v_rate_period, v_rate_burst)
                      IS DISTINCT FROM (v_ch.rate_count, v_ch.rate_period_ms, v_ch.rate_burst) THEN v_rate_count END,
            CASE WHEN (v_rate_count, v_rate_period, v_rate_burst)
                      IS DISTINCT FROM (v_ch.rate_count, v_ch.rate_period_ms, v_ch.rate_burst) THEN v_rate_period END,
            CASE WHEN (v_rate_count, v_rate_period, v_rate_burst)
                      IS DISTINCT FROM (v_ch.rate_count, v_ch.rate_period_ms, v_ch.rate_burst) THEN v_rate_burst END,
            v_rate_count IS NULL AND v_ch.rate_count IS NOT NULL);
    END IF;
    RETURN v_id;
END
$$;

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
