-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0052: strict order on plans. configure_plan(ordered=True): every channel of the
-- plan that does not set its order itself becomes ordered (one message at a time), and stops
-- being ordered with the plan; new channels on the plan are ordered from their creation. The
-- plan table gets ordered (an ordered plan's cap is 1: lonnymq_plan_ordered_one_at_a_time),
-- the channel table own_ordered (whether ordered is the channel's own, as own_* for the
-- limits; true for the channels ordered until now, which configure_channel set). Constant
-- defaults: no rewrite but the ordered channels' rows. lonnymq_configure_plan_v2 takes
-- p_ordered (lonnymq_configure_plan_v1 stays installed for the previous release:
-- superseded.sql); lonnymq_channel_plan_v1 (the creation trigger), lonnymq_order_channel_v1,
-- lonnymq_configure_channel_v4 (inherit 'ordered') and lonnymq_check_limits_v2 (ordered
-- drift) know the plan's order. Same names, arguments and results for the functions replaced.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

ALTER TABLE lonnymq_plan
    ADD COLUMN ordered boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT lonnymq_plan_ordered_one_at_a_time
        CHECK (NOT ordered OR (max_concurrency IS NOT NULL AND max_concurrency = 1));

ALTER TABLE lonnymq_channel ADD COLUMN own_ordered boolean NOT NULL DEFAULT false;
-- Every channel ordered so far was ordered by configure_channel: its own setting.
UPDATE lonnymq_channel c SET own_ordered = true WHERE c.ordered;

-- Create or change a plan: a NULL limit is left as it is (a new plan starts from the
-- defaults: weight 1, no cap, no interval, no rate, not ordered); p_unlimited removes the cap,
-- p_no_rate the bucket. p_ordered: strict order for the plan's channels (NULL: as it is); an
-- ordered plan's cap is 1 (p_ordered true without a cap sets it, another cap is refused:
-- LQ001 max_concurrency, and lonnymq_plan_ordered_one_at_a_time). Every channel that follows the plan takes the new values of the limits it does
-- not set itself, in one statement (no loop over channels), with what
-- lonnymq_configure_channel_v3 does to one channel:
-- - a channel that gets a cap where it had none counts its leases already running. Before
--   that, the ready messages of those channels are locked: a dequeue leasing them without
--   the channel's row (lonnymq_dequeue_held_v1, which serves only channels without limits)
--   is waited for, and none can start until this commits (it skips locked messages), so no
--   lease escapes the count;
-- - the channel rows are locked in id order (the order acks give slots back in), then
--   written; a new weight starts a new round, a new or changed rate a full bucket, and a
--   shorter interval or a bucket removed may bring the next turn earlier;
-- - with lonnymq_order_channel_v1's meaning, each channel that does not set its order itself
--   (own_ordered) becomes ordered with the plan, or stops being ordered (its hold or block
--   lifted at once, its next turn brought back to its head) in the same row write as its cap.
--   Refused (LQ001) before any channel is written: ordering a channel whose own cap is not 1
--   (field ordered), a cap other than 1 for an ordered channel that follows the plan's cap
--   (field max_concurrency).
-- The plan's row is locked first (channel creation and configure_channel read it FOR SHARE,
-- before the channel's row). Returns how many channels changed.
CREATE FUNCTION lonnymq_configure_plan_v2(
    p_name text, p_weight integer DEFAULT NULL, p_max_concurrency integer DEFAULT NULL,
    p_unlimited boolean DEFAULT false, p_release_interval_ms bigint DEFAULT NULL,
    p_rate_count integer DEFAULT NULL, p_rate_period_ms bigint DEFAULT NULL, p_rate_burst integer DEFAULT NULL,
    p_no_rate boolean DEFAULT false, p_ordered boolean DEFAULT NULL
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
    v_old_cap      integer;
    v_was_ordered  boolean;
    v_clash        record;
BEGIN
    PERFORM lonnymq_check_plan_name_v1(p_name);
    IF p_max_concurrency IS NOT NULL AND p_max_concurrency < 1 THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'must be positive or null (unlimited)', p_max_concurrency::text);
    END IF;
    IF p_max_concurrency IS NOT NULL AND coalesce(p_unlimited, false) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'cannot be combined with unlimited', p_max_concurrency::text);
    END IF;
    IF p_ordered AND (coalesce(p_unlimited, false) OR p_max_concurrency <> 1) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'must be 1 for an ordered plan',
                                         coalesce(p_max_concurrency::text, 'null'));
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
    v_old_cap := v_plan.max_concurrency;
    v_was_ordered := v_plan.ordered;
    IF p_ordered IS NULL AND v_plan.ordered AND (coalesce(p_unlimited, false) OR p_max_concurrency <> 1) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency',
                                         'must stay 1 while the plan is ordered (configure_plan(ordered=False) first)',
                                         coalesce(p_max_concurrency::text, 'null'));
    END IF;
    UPDATE lonnymq_plan p
       SET weight = coalesce(p_weight, p.weight),
           max_concurrency = CASE WHEN coalesce(p_unlimited, false) THEN NULL
                                  WHEN p_ordered AND p_max_concurrency IS NULL THEN 1
                                  ELSE coalesce(p_max_concurrency, p.max_concurrency) END,
           ordered = coalesce(p_ordered, p.ordered),
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
    -- Strict order and a cap other than 1 never meet on a channel (the channel's CHECK): say
    -- which channel stands in the way, and how to move it, before writing any.
    IF v_plan.ordered AND NOT v_was_ordered THEN
        SELECT c.queue, c.name, c.max_concurrency INTO v_clash FROM lonnymq_channel c
         WHERE c.plan_id = v_plan.id AND NOT c.own_ordered AND c.own_max_concurrency
           AND c.max_concurrency IS DISTINCT FROM 1
         ORDER BY c.id LIMIT 1;
        IF FOUND THEN
            PERFORM lonnymq_raise_invalid_v1('ordered', pg_catalog.format(
                'cannot order channel %s of queue %s, whose own max_concurrency is %s (let its cap follow the plan, '
                'or keep it unordered: configure_channel(..., ordered=False))',
                pg_catalog.quote_literal(v_clash.name), pg_catalog.quote_literal(v_clash.queue),
                coalesce(v_clash.max_concurrency::text, 'null')), 'true');
        END IF;
    END IF;
    IF v_plan.max_concurrency IS DISTINCT FROM 1 AND v_old_cap IS NOT DISTINCT FROM 1 THEN
        SELECT c.queue, c.name INTO v_clash FROM lonnymq_channel c
         WHERE c.plan_id = v_plan.id AND c.own_ordered AND c.ordered AND NOT c.own_max_concurrency
         ORDER BY c.id LIMIT 1;
        IF FOUND THEN
            PERFORM lonnymq_raise_invalid_v1('max_concurrency', pg_catalog.format(
                'must stay 1: channel %s of queue %s is ordered and follows the plan''s cap (give it its own '
                'cap of 1 first: configure_channel(..., max_concurrency=1))',
                pg_catalog.quote_literal(v_clash.name), pg_catalog.quote_literal(v_clash.queue)),
                coalesce(v_plan.max_concurrency::text, 'null'));
        END IF;
    END IF;
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
               CASE WHEN c.own_ordered THEN c.ordered ELSE v_plan.ordered END AS ordered,
               c.ordered AS old_ordered, c.hold_until AS old_hold_until,
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
          -- changed or removed, a hold lifted (a cap or a weight does not move it).
          LEFT JOIN LATERAL (
              SELECT mm.dequeue_at FROM lonnymq_message mm
               WHERE mm.channel_id = t.id AND mm.lease_until IS NULL
                 AND (t.release_interval_ms < t.old_release_interval_ms
                      OR (t.old_hold_until IS NOT NULL AND NOT t.ordered)
                      OR (t.rate_count, t.rate_period_ms, t.rate_burst)
                         IS DISTINCT FROM (t.old_rate_count, t.old_rate_period_ms, t.old_rate_burst))
               ORDER BY mm.dequeue_at, mm.id LIMIT 1
          ) h ON true
         WHERE (t.weight, t.max_concurrency, t.release_interval_ms, t.rate_count, t.rate_period_ms, t.rate_burst)
               IS DISTINCT FROM (t.old_weight, t.old_max_concurrency, t.old_release_interval_ms, t.old_rate_count,
                                 t.old_rate_period_ms, t.old_rate_burst)
            OR t.ordered IS DISTINCT FROM t.old_ordered
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
               ordered = x.ordered,
               hold_until = CASE WHEN x.ordered THEN c.hold_until END,
               blocked_by = CASE WHEN x.ordered THEN c.blocked_by END,
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

-- A new channel follows its queue's default plan (lonnymq_queue_plan) unless it names one,
-- and takes the plan's value of every limit it does not set itself, and its strict order. A BEFORE INSERT trigger:
-- it runs when a channel is created (by an enqueue, a publish, a requeue or configure_channel),
-- never on the rows a dequeue or an ack writes. The plan's row is read FOR SHARE, so a
-- concurrent change of the plan either waits for this transaction (and then rewrites the new
-- channel with the others) or committed before and is read here.
CREATE OR REPLACE FUNCTION lonnymq_channel_plan_v1() RETURNS trigger
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
        IF NOT NEW.own_ordered THEN
            NEW.ordered := v_plan.ordered;
        END IF;
    END IF;
    RETURN NEW;
END
$$;

-- Make a channel ordered, or not. An ordered channel releases one message at a time (the
-- caller set max_concurrency 1 in the same transaction: lonnymq_channel_ordered_one_at_a_time),
-- in release order; a retry or a snooze holds it, a dead message blocks it. Turning it off
-- lifts any hold or block at once and wakes the channel. Either way the setting becomes the
-- channel's own (own_ordered): its plan's ordered no longer changes it (configure_channel's
-- inherit 'ordered' makes it follow the plan again). The channel must exist (LQ001).
CREATE OR REPLACE FUNCTION lonnymq_order_channel_v1(p_queue text, p_channel text, p_ordered boolean) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM lonnymq_check_names_v1(p_queue, p_channel);
    IF p_ordered IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('ordered', 'must be true or false', NULL);
    END IF;
    UPDATE lonnymq_channel c
       SET ordered = p_ordered,
           own_ordered = true,
           hold_until = CASE WHEN p_ordered THEN c.hold_until END,
           blocked_by = CASE WHEN p_ordered THEN c.blocked_by END
     WHERE c.queue = p_queue AND c.name = p_channel
    RETURNING c.id INTO v_id;
    IF v_id IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('channel', pg_catalog.format('must name a channel of queue %s',
                                         pg_catalog.quote_literal(p_queue)), pg_catalog.quote_literal(p_channel));
    END IF;
    IF NOT p_ordered AND lonnymq_wake_v1(v_id, lonnymq_now_ms_v1(), 0::bigint) THEN
        PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    END IF;
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
-- new rate starts with a full bucket, as there. So does strict order unless the channel set
-- it itself (own_ordered; p_inherit 'ordered' follows the plan again): a channel the plan
-- orders gets ordered after its cap became 1 (a cap other than 1 is refused, LQ001), one
-- that stops being ordered has its hold or block lifted before its cap changes, and is woken. The plan's row is read FOR SHARE before the
-- channel's row is locked (the order lonnymq_configure_plan_v1 takes them in).
CREATE OR REPLACE FUNCTION lonnymq_configure_channel_v4(
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
    v_own_ordered  boolean;
    v_ordered      boolean;
    v_bad          text;
BEGIN
    PERFORM lonnymq_check_list_v1('inherit', pg_catalog.array_ndims(p_inherit));
    SELECT u.x INTO v_bad FROM pg_catalog.unnest(v_inherit) AS u(x)
     WHERE u.x IS NULL OR u.x NOT IN ('weight', 'max_concurrency', 'release_interval', 'rate', 'ordered') LIMIT 1;
    IF FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('inherit',
                                         'must name weight, max_concurrency, release_interval, rate or ordered',
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
    v_own_ordered := CASE WHEN 'ordered' = ANY (v_inherit) THEN false ELSE v_ch.own_ordered END;
    v_ordered := CASE WHEN v_own_ordered THEN v_ch.ordered ELSE coalesce(v_plan.ordered, false) END;
    IF v_ordered AND v_cap IS DISTINCT FROM 1 THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency',
            CASE WHEN v_own_ordered THEN 'must stay 1 while the channel is ordered (configure_channel(ordered=False) first)'
                 ELSE pg_catalog.format('must be 1: plan %s orders the channel (let its cap follow the plan, '
                                        'or configure_channel(..., ordered=False) first)',
                                        pg_catalog.quote_literal(v_plan.name)) END,
            coalesce(v_cap::text, 'null'));
    END IF;

    UPDATE lonnymq_channel c
       SET plan_id = v_plan.id,
           own_weight = v_own_weight,
           own_max_concurrency = v_own_cap,
           own_release_interval = v_own_interval,
           own_rate = v_own_rate,
           own_ordered = v_own_ordered,
           -- Stops being ordered: before its cap may change (lonnymq_channel_ordered_one_at_a_time).
           ordered = v_ordered AND c.ordered,
           hold_until = CASE WHEN v_ordered THEN c.hold_until END,
           blocked_by = CASE WHEN v_ordered THEN c.blocked_by END
     WHERE c.id = v_id
       AND (c.plan_id, c.own_weight, c.own_max_concurrency, c.own_release_interval, c.own_rate, c.own_ordered,
            c.ordered AND NOT v_ordered)
           IS DISTINCT FROM (v_plan.id, v_own_weight, v_own_cap, v_own_interval, v_own_rate, v_own_ordered, false);
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
    IF v_ordered AND NOT v_ch.ordered THEN
        UPDATE lonnymq_channel c SET ordered = true WHERE c.id = v_id;
    ELSIF v_ch.ordered AND NOT v_ordered AND lonnymq_wake_v1(v_id, lonnymq_now_ms_v1(), 0::bigint) THEN
        PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    END IF;
    RETURN v_id;
END
$$;

-- Channels whose limits drifted from where they come from: one row per limit that is not
-- the channel's own and differs from its plan's value (or, without a plan, the default);
-- strict order (ordered) counts as one.
-- lonnymq_check_v2's companion (the named statement check runs both). The channel row's own
-- columns pick the drifted channels first (typed comparisons, true for every row the text
-- comparison below reports); only those are spelled out limit by limit.
CREATE OR REPLACE FUNCTION lonnymq_check_limits_v2()
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
         NULLIF(pg_catalog.concat_ws('/', p.rate_count, p.rate_period_ms, p.rate_burst), '')),
        ('ordered', NOT c.own_ordered, c.ordered::text, coalesce(p.ordered, false)::text)
     ) AS v(lim, inherited, actual, expected)
     WHERE ((NOT c.own_weight AND c.weight IS DISTINCT FROM coalesce(p.weight, 1))
            OR (NOT c.own_max_concurrency AND c.max_concurrency IS DISTINCT FROM p.max_concurrency)
            OR (NOT c.own_release_interval
                AND c.release_interval_ms IS DISTINCT FROM coalesce(p.release_interval_ms, 0::bigint))
            OR (NOT c.own_rate AND (c.rate_count, c.rate_period_ms, c.rate_burst)
                                   IS DISTINCT FROM (p.rate_count, p.rate_period_ms, p.rate_burst))
            OR (NOT c.own_ordered AND c.ordered IS DISTINCT FROM coalesce(p.ordered, false)))
       AND v.inherited AND v.actual IS DISTINCT FROM v.expected
$$;
