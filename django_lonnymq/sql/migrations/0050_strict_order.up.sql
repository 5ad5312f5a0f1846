-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0050: strict order per channel. configure_channel(ordered=True): one message
-- at a time, in release order; a retry or a snooze keeps its message at the head and holds the
-- channel until then (hold_until), a dead message blocks it until requeued or skipped
-- (blocked_by). The channel table gets three columns (constant defaults, NULLs: no rewrite);
-- lonnymq_dequeue_v1 releases nothing from a held channel, lonnymq_unlease_v1 holds instead
-- of moving an ordered message back, lonnymq_bury_v1 blocks, the wake-ups (wake, mark,
-- mark_many, apply_marks) keep a held channel's turn at its hold, lonnymq_requeue_dead_v1 puts the
-- message back at the head and unblocks, lonnymq_check_v2 knows a held channel is not
-- stranded. Same names, arguments and results for the functions replaced.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

ALTER TABLE lonnymq_channel
    ADD COLUMN ordered boolean NOT NULL DEFAULT false,
    ADD COLUMN hold_until bigint NULL,
    ADD COLUMN blocked_by bigint NULL,
    ADD CONSTRAINT lonnymq_channel_ordered_one_at_a_time CHECK (NOT ordered OR max_concurrency = 1),
    ADD CONSTRAINT lonnymq_channel_hold_range CHECK (hold_until BETWEEN 0 AND 253402300799999),
    ADD CONSTRAINT lonnymq_channel_blocked_is_held CHECK (blocked_by IS NULL OR hold_until IS NOT NULL);

-- Ordered channels a dead message blocks, by queue (api.blocked_channels, the admin).
CREATE INDEX lonnymq_channel_blocked_idx ON lonnymq_channel (queue, name) WHERE blocked_by IS NOT NULL;

-- Make a channel ordered, or not. An ordered channel releases one message at a time (the
-- caller set max_concurrency 1 in the same transaction: lonnymq_channel_ordered_one_at_a_time),
-- in release order; a retry or a snooze holds it, a dead message blocks it. Turning it off
-- lifts any hold or block at once and wakes the channel. The channel must exist (LQ001).
CREATE FUNCTION lonnymq_order_channel_v1(p_queue text, p_channel text, p_ordered boolean) RETURNS void
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

-- Skip the dead message that blocks an ordered channel: the channel goes on with the messages
-- after it (the dead one stays in the dead letters). Returns the id of the message skipped,
-- NULL when the channel was not blocked. The channel must exist (LQ001).
CREATE FUNCTION lonnymq_unblock_channel_v1(p_queue text, p_channel text) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_c lonnymq_channel%ROWTYPE;
BEGIN
    PERFORM lonnymq_check_names_v1(p_queue, p_channel);
    SELECT * INTO v_c FROM lonnymq_channel c WHERE c.queue = p_queue AND c.name = p_channel FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('channel', pg_catalog.format('must name a channel of queue %s',
                                         pg_catalog.quote_literal(p_queue)), pg_catalog.quote_literal(p_channel));
    END IF;
    IF v_c.blocked_by IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE lonnymq_channel c SET hold_until = NULL, blocked_by = NULL WHERE c.id = v_c.id;
    IF lonnymq_wake_v1(v_c.id, lonnymq_now_ms_v1(), 0::bigint) THEN
        PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    END IF;
    RETURN v_c.blocked_by;
END
$$;

-- Make sure a channel will look at a message that becomes ready at p_dequeue_at (no earlier
-- than its release interval, its next token and an ordered channel's hold allow: this floor
-- is the same in lonnymq_mark_v1, lonnymq_mark_many_v1 and lonnymq_apply_marks_v1).
-- Lowers next_dequeue_at only when it must (more than p_tolerance_ms later than needed), so
-- enqueues into a busy channel take no row lock. The caller holds the channel's shared
-- advisory lock (see docs/locking.md). Under REPEATABLE READ or SERIALIZABLE the lowering is
-- unconditional: the row lock then keeps dequeuers from parking the channel until commit.
CREATE OR REPLACE FUNCTION lonnymq_wake_v1(p_channel_id bigint, p_dequeue_at bigint, p_tolerance_ms bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        UPDATE lonnymq_channel c
           SET next_dequeue_at = greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until),
               turn = pg_catalog.nextval('lonnymq_turn_seq') * 100000
         WHERE c.id = p_channel_id
           AND (c.next_dequeue_at IS NULL
                OR c.next_dequeue_at > greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until)
                                       + p_tolerance_ms);
    ELSE
        UPDATE lonnymq_channel c
           SET next_dequeue_at = least(
                   coalesce(c.next_dequeue_at, 9223372036854775807),
                   greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until)),
               turn = CASE WHEN c.next_dequeue_at IS NULL
                             OR c.next_dequeue_at > greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until)
                           THEN pg_catalog.nextval('lonnymq_turn_seq') * 100000 ELSE c.turn END
         WHERE c.id = p_channel_id;
    END IF;
    RETURN FOUND;
END
$$;

-- A producer's wake-up: leave a mark for a channel whose next turn is not early enough for a
-- message due at p_dequeue_at. Takes no row lock: the mark becomes visible when the producer
-- commits and the next dequeue applies it. The caller holds the channel's shared advisory
-- lock, so no dequeuer parks it meanwhile (docs/locking.md). Under READ COMMITTED a mark
-- already there and early enough (committed, or this transaction's own) will do: only a
-- dequeue that applies it deletes it. So enqueues into a channel no worker has visited yet
-- leave one mark, not one per transaction. Under REPEATABLE READ or SERIALIZABLE the
-- producer's snapshot may predate a park: it always marks. Notifies the queue's workers
-- (delivered at commit) when it marked. Scalar statements on purpose: their generic plans
-- are index probes, so plpgsql does not re-plan them on every call.
CREATE OR REPLACE FUNCTION lonnymq_mark_v1(p_queue text, p_channel_id bigint, p_dequeue_at bigint,
                                           p_tolerance_ms bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_next  bigint;
    v_floor bigint;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        SELECT c.next_dequeue_at, greatest(c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until) INTO v_next, v_floor
          FROM lonnymq_channel c WHERE c.id = p_channel_id;
        IF v_next IS NOT NULL AND v_next <= greatest(p_dequeue_at, v_floor) + p_tolerance_ms THEN
            RETURN false;
        END IF;
        PERFORM FROM lonnymq_wake w
          WHERE w.channel_id = p_channel_id AND w.dequeue_at <= p_dequeue_at + p_tolerance_ms;
        IF FOUND THEN
            RETURN false;
        END IF;
    END IF;
    -- A later message of the same transaction rewrites its mark only when it is due earlier
    -- (a rewrite on every call would pile up row versions inside one long transaction).
    INSERT INTO lonnymq_wake AS w (queue, channel_id, dequeue_at)
    VALUES (p_queue, p_channel_id, p_dequeue_at)
    ON CONFLICT (channel_id, xact) DO UPDATE SET dequeue_at = excluded.dequeue_at
        WHERE excluded.dequeue_at < w.dequeue_at;
    PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    RETURN true;
END
$$;

-- The same for many channels (distinct ids, each with the earliest time it needs), in one
-- statement: enqueue_many's wake-up. Under READ COMMITTED a channel that already has a
-- committed mark early enough needs no other: the next dequeue applies that mark, and while
-- this transaction holds the channel's shared advisory lock no dequeuer parks the channel
-- (docs/locking.md). So a producer that writes chunk after chunk into channels no worker has
-- looked at yet leaves one mark per channel, not one per chunk.
CREATE OR REPLACE FUNCTION lonnymq_mark_many_v1(p_queue text, p_channel_ids bigint[], p_dequeue_ats bigint[],
                                     p_tolerance_ms bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_marked integer;
BEGIN
    INSERT INTO lonnymq_wake AS w (queue, channel_id, dequeue_at)
    SELECT p_queue, c.id, u.at
      FROM ROWS FROM (pg_catalog.unnest(p_channel_ids), pg_catalog.unnest(p_dequeue_ats)) AS u(id, at)
      JOIN lonnymq_channel c ON c.id = u.id AND c.id = ANY (p_channel_ids)
     WHERE pg_catalog.current_setting('transaction_isolation') <> 'read committed'
        OR ((c.next_dequeue_at IS NULL
             OR c.next_dequeue_at > greatest(u.at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until) + p_tolerance_ms)
            AND NOT EXISTS (SELECT 1 FROM lonnymq_wake m
                             WHERE m.channel_id = c.id AND m.dequeue_at <= u.at + p_tolerance_ms))
    ON CONFLICT (channel_id, xact) DO UPDATE SET dequeue_at = excluded.dequeue_at
        WHERE excluded.dequeue_at < w.dequeue_at;
    GET DIAGNOSTICS v_marked = ROW_COUNT;
    IF v_marked > 0 THEN
        PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    END IF;
    RETURN v_marked > 0;
END
$$;

-- A dequeuer's first step: apply the committed marks of a queue to their channels (only
-- ever earlier) and delete them, earliest first, in batches of 200 for at most about 10 ms
-- a call. Marks whose channel row another session holds stay for the next call; nothing
-- here waits. Each batch is taken from the queue's index in its order and only then joined
-- to its channel rows, so a batch costs the same whatever the number of marks left. A bulk
-- enqueue into 100,000 parked channels leaves 100,000 marks: applied 10,000 a call, after a
-- join and sort of all of them, they took each of the next ten dequeues past 100 ms
-- (docs/performance.md, "At scale"). The planner settings keep the index's order where the
-- table has no statistics yet (the default estimate of a queue's marks is a few hundred
-- rows, which the planner would rather fetch all and sort).
CREATE OR REPLACE FUNCTION lonnymq_apply_marks_v1(p_queue text, p_tolerance_ms bigint) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_start  timestamptz := pg_catalog.clock_timestamp();
    v_ids    bigint[];
    v_ats    bigint[];
    v_taken  integer;
BEGIN
    LOOP
        WITH picked AS (
            SELECT w.id, w.channel_id, w.dequeue_at
              FROM lonnymq_wake w
             WHERE w.queue = p_queue
             ORDER BY w.dequeue_at
             LIMIT 200
               FOR UPDATE OF w SKIP LOCKED
        ), marks AS (
            SELECT p.id, p.channel_id, p.dequeue_at
              FROM picked p
              JOIN lonnymq_channel c ON c.id = p.channel_id
               FOR NO KEY UPDATE OF c SKIP LOCKED
        ), gone AS (
            DELETE FROM lonnymq_wake w WHERE w.id IN (SELECT m.id FROM marks m)
            RETURNING w.channel_id, w.dequeue_at
        )
        SELECT pg_catalog.array_agg(g.channel_id ORDER BY g.channel_id), pg_catalog.array_agg(g.at ORDER BY g.channel_id),
               (SELECT pg_catalog.count(*) FROM picked)
          INTO v_ids, v_ats, v_taken
          FROM (SELECT channel_id, pg_catalog.min(dequeue_at) AS at FROM gone GROUP BY channel_id) g;
        IF v_ids IS NOT NULL THEN
            UPDATE lonnymq_channel c
               SET next_dequeue_at = greatest(u.at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until),
                   turn = pg_catalog.nextval('lonnymq_turn_seq') * 100000
              FROM ROWS FROM (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_ats)) AS u(id, at)
             WHERE c.id = u.id AND c.id = ANY (v_ids)
               AND (c.next_dequeue_at IS NULL
                    OR c.next_dequeue_at > greatest(u.at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until) + p_tolerance_ms);
        END IF;
        -- The queue's marks are all taken, or the rest are held by other dequeuers (rows this
        -- call holds come back to it: SKIP LOCKED skips only others'), or the time is spent.
        EXIT WHEN v_ids IS NULL OR v_taken < 200
               OR pg_catalog.clock_timestamp() - v_start > interval '10 milliseconds';
    END LOOP;
END
$$;

-- Lease up to p_batch_size messages of one queue, round robin across its channels.
-- Picks up to p_batch_size eligible channels (SKIP LOCKED), splits the batch fairly across
-- them (capped by free concurrency slots and rate limits: a release interval releases one,
-- a token bucket as many as it holds tokens), leases each picked channel's first ready
-- messages, and moves every picked channel to its next turn. A channel of weight w takes w
-- messages per round. Rows come back in round-robin order: the first round of each channel
-- in pick order, then the second, and so on. When every due channel is held by another
-- dequeuer, the call leases messages of those without limits without their rows
-- (lonnymq_dequeue_held_v1). A queue with a lonnymq_queue_config row releases no more than
-- its cap's free slots and its bucket's tokens allow, and nothing while it is paused.
CREATE OR REPLACE FUNCTION lonnymq_dequeue_v1(
    p_queue        text,
    p_batch_size   integer DEFAULT 1,
    p_lease_ms     bigint  DEFAULT 30000,
    p_worker       text    DEFAULT NULL,
    p_tolerance_ms bigint  DEFAULT 50,
    p_recheck_ms   bigint  DEFAULT 100
) RETURNS TABLE (
    id bigint, channel text, payload jsonb, attempts integer, max_attempts integer,
    priority smallint, dedup_key text, enqueued_at timestamptz, lease_token uuid, lease_until bigint
)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_now         bigint;
    v_token       uuid := pg_catalog.gen_random_uuid();
    v_turn_base   bigint;
    v_ch_ids      bigint[];
    v_ch_names    text[];
    v_quotas      integer[];
    v_limited     bigint[];
    v_weights     integer[];
    v_used        integer[];
    v_levels      bigint[];
    v_rounds_first bigint;
    v_weight_sum  bigint;
    v_rounds      bigint;
    v_n           integer;
    v_msg_ids     bigint[];
    v_msg_ords    bigint[];
    v_msg_rounds  bigint[];
    v_cut_owed    bigint[];
    v_next_ids    bigint[];
    v_next_at     bigint[];
    v_next_last   bigint[];
    v_next_leased integer[];
    v_next_token  bigint[];
    v_next_level  bigint[];
    v_owed        boolean[];
    v_rate_n      integer[];
    v_rate_period bigint[];
    v_lock_timeout text;
    v_intervals   bigint[];
    i             integer;
    v_head        bigint;
    v_floor       bigint;
    v_level       bigint;
    v_batch       integer;
    v_qc          lonnymq_queue_config%ROWTYPE;
    v_q_known     boolean := false;
    v_q_level     bigint;
    v_q_leased    integer;
    v_bursts      integer[];
    v_tokens      bigint[];
    v_msg_costs   bigint[];
    v_next_spent  bigint[];
    v_head_costs  integer[];
    v_keep        integer;
    v_q_spent     bigint;
    v_q_need      bigint := 1;
    v_need        bigint;
    v_holds       bigint[];
    v_buckets     boolean;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'dequeue needs READ COMMITTED, the session runs %', pg_catalog.current_setting('transaction_isolation')
            USING ERRCODE = 'LQ006';
    END IF;
    IF p_batch_size IS NULL OR p_batch_size NOT BETWEEN 1 AND 10000 THEN
        PERFORM lonnymq_raise_invalid_v1('batch_size', 'must be between 1 and 10000', p_batch_size::text);
    END IF;
    PERFORM lonnymq_check_range_v1('lease', p_lease_ms, 1::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_range_v1('recheck', p_recheck_ms, 0::bigint, 86400000::bigint, false);
    v_now := lonnymq_now_ms_v1();
    v_batch := p_batch_size;

    -- 1. Pick channels whose turn has come, in round-robin order; skip those another
    --    dequeuer holds. NO KEY UPDATE does not conflict with the KEY SHARE locks that
    --    producers' foreign-key checks hold on the channel row.
    --    SKIP LOCKED does not apply where PostgreSQL follows a channel row's update chain
    --    ("while locking updated version of tuple"): two dequeuers can then wait on each
    --    other until deadlock_timeout (1 s) kills one. A short lock timeout ends that wait
    --    after 20 ms; the call then serves the held channels, as when it finds none free.
    --    room: what the channel's limits let it release now. level: a token bucket's fill
    --    now (in token x period units; one release costs rate_period_ms of them), refilled
    --    at rate_count units per ms since the last release, up to rate_burst tokens.
    v_lock_timeout := pg_catalog.current_setting('lock_timeout');
    PERFORM pg_catalog.set_config('lock_timeout', '20ms', true);
    BEGIN
        -- 0. A queue-wide limit: lock the queue's row (the wait is bounded by the lock
        --    timeout), so concurrent dequeuers of the queue never admit more than it allows.
        --    Without a row this is one index probe. A paused queue releases nothing.
        SELECT * INTO v_qc FROM lonnymq_queue_config qc WHERE qc.queue = p_queue FOR NO KEY UPDATE;
        v_q_known := true;
        IF v_qc.queue IS NOT NULL THEN
            IF v_qc.paused THEN
                PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
                RETURN;
            END IF;
            IF v_qc.max_concurrency IS NOT NULL THEN
                v_batch := least(v_batch, greatest(v_qc.max_concurrency - v_qc.in_flight, 0));
            END IF;
            IF v_qc.rate_count IS NOT NULL THEN
                v_q_level := CASE WHEN v_qc.bucket_level IS NULL OR v_qc.last_release_at IS NULL
                                  THEN v_qc.rate_burst::bigint * v_qc.rate_period_ms
                                  ELSE least(v_qc.rate_burst::bigint * v_qc.rate_period_ms,
                                             v_qc.bucket_level + least(greatest(v_now - v_qc.last_release_at, 0::bigint),
                                                                       v_qc.rate_burst::bigint * v_qc.rate_period_ms)
                                                               * v_qc.rate_count::bigint) END;
                -- Never refill from a release "after" this call's clock reading.
                v_batch := CASE WHEN v_qc.last_release_at > v_now THEN 0
                                ELSE least(v_batch::bigint, v_q_level / v_qc.rate_period_ms)::integer END;
            END IF;
            IF v_batch < 1 THEN
                PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
                RETURN;
            END IF;
        END IF;
        -- Producers' committed wake-up marks lower their channels' next turn first.
        IF EXISTS (SELECT 1 FROM lonnymq_wake w WHERE w.queue = p_queue) THEN
            PERFORM lonnymq_apply_marks_v1(p_queue, p_tolerance_ms);
        END IF;
        -- The aggregates read the picked rows in the subquery's round-robin order (one sort;
        -- before PostgreSQL 16 every aggregate with its own ORDER BY sorts again).
        SELECT pg_catalog.array_agg(p.id),
               pg_catalog.array_agg(p.name),
               pg_catalog.array_agg(CASE WHEN p.level IS NULL THEN p.room
                                         ELSE least(p.room::bigint, p.level / p.rate_period_ms)::integer END),
               pg_catalog.array_agg(p.id) FILTER (WHERE p.max_concurrency IS NOT NULL),
               pg_catalog.array_agg(p.weight),
               pg_catalog.array_agg(p.round_used),
               pg_catalog.array_agg(p.level),
               pg_catalog.array_agg(p.rate_burst),
               pg_catalog.array_agg(p.level / p.rate_period_ms), pg_catalog.bool_or(p.level IS NOT NULL),
               pg_catalog.sum(p.weight - p.round_used), pg_catalog.sum(p.weight)
          INTO v_ch_ids, v_ch_names, v_quotas, v_limited, v_weights, v_used, v_levels, v_bursts, v_tokens, v_buckets,
               v_rounds_first, v_weight_sum
          FROM (
            SELECT c.id, c.name, c.next_dequeue_at, c.turn, c.max_concurrency, c.weight, c.round_used,
                   c.rate_period_ms, c.rate_burst,
                   -- NULL: no limit but the batch. An ordered channel held for a retry or a
                   -- dead message releases nothing (its next turn waits for hold_until).
                   CASE WHEN c.hold_until > v_now THEN 0
                        WHEN c.release_interval_ms > 0 THEN 1
                        WHEN c.max_concurrency IS NOT NULL THEN c.max_concurrency - c.in_flight END AS room,
                   CASE WHEN c.rate_count IS NULL THEN NULL
                        WHEN c.bucket_level IS NULL OR c.last_dequeue_at IS NULL
                        THEN c.rate_burst::bigint * c.rate_period_ms
                        ELSE least(c.rate_burst::bigint * c.rate_period_ms,
                                   c.bucket_level + least(greatest(v_now - c.last_dequeue_at, 0::bigint),
                                                          c.rate_burst::bigint * c.rate_period_ms)
                                                    * c.rate_count::bigint) END AS level
              FROM lonnymq_channel c
             WHERE c.queue = p_queue
               AND c.next_dequeue_at <= v_now
               AND c.next_dequeue_at IS NOT NULL
               AND NOT c.paused
               AND (c.max_concurrency IS NULL OR c.in_flight < c.max_concurrency)
               -- A bucket refills from its last release: never from a release "after" now
               -- (another dequeuer's clock read a moment later).
               AND (c.rate_count IS NULL OR c.last_dequeue_at IS NULL OR c.last_dequeue_at <= v_now)
             ORDER BY c.next_dequeue_at, c.turn
             LIMIT v_batch
               FOR NO KEY UPDATE OF c SKIP LOCKED
          ) p;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        v_ch_ids := NULL;
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
    v_n := coalesce(pg_catalog.cardinality(v_ch_ids), 0);
    IF v_n = 0 AND (NOT v_q_known OR v_qc.queue IS NOT NULL) THEN
        -- A queue-wide limit (or a queue row this call could not read in time): no lease
        -- without the queue's count. Its dequeuers take the queue's row in turn, so they
        -- seldom find every channel held.
        RETURN;
    END IF;
    IF v_n = 0 THEN
        -- No due channel we could lock: the others' dequeuers hold them (or none is due).
        -- Those without limits are served without their rows.
        RETURN QUERY
            SELECT h.id, h.channel, h.payload, h.attempts, h.max_attempts, h.priority, h.dedup_key,
                   h.enqueued_at, h.lease_token, h.lease_until
              FROM lonnymq_dequeue_held_v1(p_queue, p_batch_size, v_now, p_lease_ms, p_worker, v_token) h;
        RETURN;
    END IF;

    -- 2. Candidate messages: each picked channel's first ready ones, in rounds: a channel of
    --    weight w takes w per round (fewer in the first round when it is part-way through
    --    one). Enough rounds for a full batch if every channel had a backlog (with weights
    --    1: ceil(batch / channels) each, as a plain round robin), capped by the room. Then
    --    the batch is cut in round-robin order (round, pick order, rank), the order the
    --    aggregates read the subquery in.
    v_rounds := pg_catalog.ceil(greatest(v_batch - v_rounds_first, 0)::numeric / v_weight_sum::numeric)::bigint;
    --    A channel with a token bucket takes messages in order while their costs fit its
    --    tokens (tokens: level / rate_period_ms), each charged at most the bucket's burst, so
    --    a message that costs more than a smaller bucket holds goes once the bucket is full;
    --    a cheaper message never passes a dearer one. When neither the queue nor any channel
    --    picked has a bucket, costs are not read at all: the plain query below.
    IF v_buckets OR v_qc.rate_count IS NOT NULL THEN
        SELECT pg_catalog.array_agg(x.id), pg_catalog.array_agg(x.ord), pg_catalog.array_agg(x.rnd),
               pg_catalog.array_agg(x.cost)
          INTO v_msg_ids, v_msg_ords, v_msg_rounds, v_msg_costs
          FROM (
            SELECT m.id, m.rank, p.ord, (p.used + m.rank - 1) / p.weight AS rnd, m.cost
              FROM ROWS FROM (pg_catalog.unnest(v_ch_ids), pg_catalog.unnest(v_quotas),
                              pg_catalog.unnest(v_weights), pg_catalog.unnest(v_used),
                              pg_catalog.unnest(v_tokens), pg_catalog.unnest(v_bursts))
                   WITH ORDINALITY AS p(channel_id, room, weight, used, tokens, burst, ord)
              CROSS JOIN LATERAL (
                  SELECT r.id, r.rank, r.cost
                    FROM (SELECT q.id, q.cost, pg_catalog.row_number() OVER w AS rank,
                                 pg_catalog.sum(q.cost) OVER w AS spent
                            FROM (SELECT mm.id, mm.dequeue_at, least(mm.cost, coalesce(p.burst, mm.cost))::bigint AS cost
                                    FROM lonnymq_message mm
                                   WHERE mm.channel_id = p.channel_id
                                     AND mm.lease_until IS NULL
                                     AND mm.dequeue_at <= v_now
                                   ORDER BY mm.dequeue_at, mm.id
                                   LIMIT least(p.room::bigint, (p.weight - p.used)::bigint + v_rounds * p.weight::bigint,
                                               v_batch::bigint)
                                     FOR UPDATE OF mm SKIP LOCKED) q
                          WINDOW w AS (ORDER BY q.dequeue_at, q.id)) r
                   WHERE p.tokens IS NULL OR r.spent <= p.tokens
              ) m
             ORDER BY 4, p.ord, m.rank
          ) x;
    ELSE
        SELECT pg_catalog.array_agg(x.id), pg_catalog.array_agg(x.ord), pg_catalog.array_agg(x.rnd)
          INTO v_msg_ids, v_msg_ords, v_msg_rounds
          FROM (
            SELECT m.id, m.rank, p.ord, (p.used + m.rank - 1) / p.weight AS rnd
              FROM ROWS FROM (pg_catalog.unnest(v_ch_ids), pg_catalog.unnest(v_quotas),
                              pg_catalog.unnest(v_weights), pg_catalog.unnest(v_used))
                   WITH ORDINALITY AS p(channel_id, room, weight, used, ord)
              CROSS JOIN LATERAL (
                  SELECT q.id, pg_catalog.row_number() OVER (ORDER BY q.dequeue_at, q.id) AS rank
                    FROM (SELECT mm.id, mm.dequeue_at
                            FROM lonnymq_message mm
                           WHERE mm.channel_id = p.channel_id
                             AND mm.lease_until IS NULL
                             AND mm.dequeue_at <= v_now
                           ORDER BY mm.dequeue_at, mm.id
                           LIMIT least(p.room::bigint, (p.weight - p.used)::bigint + v_rounds * p.weight::bigint,
                                       v_batch::bigint)
                             FOR UPDATE OF mm SKIP LOCKED) q
              ) m
             ORDER BY 4, p.ord, m.rank
          ) x;
    END IF;
    -- Cut to the batch, and to what a queue-wide bucket's tokens pay for (in round-robin
    -- order, each message charged at most the queue's burst). The channels whose round the
    -- cut interrupted are owed the rest of it: they keep their place in the rotation (step 4).
    v_keep := least(coalesce(pg_catalog.cardinality(v_msg_ids), 0), v_batch);
    IF v_qc.rate_count IS NOT NULL AND v_keep > 0 THEN
        -- v_q_need: the tokens the first message left out needs (the queue's next token waits for them).
        SELECT pg_catalog.count(*) FILTER (WHERE s.spent <= v_q_level / v_qc.rate_period_ms),
               coalesce((pg_catalog.array_agg(s.cost ORDER BY s.pos)
                             FILTER (WHERE s.spent > v_q_level / v_qc.rate_period_ms))[1], 1)
          INTO v_keep, v_q_need
          FROM (SELECT least(u.cost, v_qc.rate_burst::bigint) AS cost, u.pos,
                       pg_catalog.sum(least(u.cost, v_qc.rate_burst::bigint)) OVER (ORDER BY u.pos) AS spent
                  FROM pg_catalog.unnest(v_msg_costs[1:v_keep]) WITH ORDINALITY AS u(cost, pos)) s;
        IF v_keep = 0 THEN
            -- Not one message fits the queue's tokens: its next token waits for the first one's cost.
            UPDATE lonnymq_queue_config qc
               SET next_token_at = v_now + (v_q_need * qc.rate_period_ms - v_q_level + qc.rate_count - 1) / qc.rate_count
             WHERE qc.queue = p_queue;
        END IF;
    END IF;
    IF coalesce(pg_catalog.cardinality(v_msg_ids), 0) > v_keep THEN
        SELECT pg_catalog.array_agg(DISTINCT o.ord) INTO v_cut_owed
          FROM ROWS FROM (pg_catalog.unnest(v_msg_ords), pg_catalog.unnest(v_msg_rounds)) WITH ORDINALITY AS o(ord, rnd, pos)
         WHERE o.pos > v_keep AND (v_keep = 0 OR o.rnd = v_msg_rounds[v_keep]);
        v_msg_ids := CASE WHEN v_keep > 0 THEN v_msg_ids[1:v_keep] END;
        v_msg_ords := CASE WHEN v_keep > 0 THEN v_msg_ords[1:v_keep] END;
        v_msg_costs := CASE WHEN v_keep > 0 THEN v_msg_costs[1:v_keep] END;
    END IF;

    -- 3. Lease them (matched by id array: a join here is planned as a full scan), and add
    --    them to the result, in batch order, from the rows the update wrote: reading them
    --    again afterwards cost a fifth of the call. RETURN QUERY does not end the call.
    IF v_msg_ids IS NOT NULL THEN
        RETURN QUERY
            WITH leased AS (
                UPDATE lonnymq_message m
                   SET lease_until = v_now + p_lease_ms,
                       lease_token = v_token,
                       leased_by = p_worker,
                       attempts = m.attempts + 1,
                       slot_taken = (v_limited IS NOT NULL AND m.channel_id = ANY (v_limited)),
                       queue_slot = (v_qc.max_concurrency IS NOT NULL)
                 WHERE m.id = ANY (v_msg_ids)
                RETURNING m.id, m.payload, m.attempts, m.max_attempts, m.priority, m.dedup_key, m.enqueued_at
            )
            SELECT l.id, v_ch_names[v_msg_ords[o.pos]], l.payload, l.attempts, l.max_attempts, l.priority,
                   l.dedup_key, l.enqueued_at, v_token, v_now + p_lease_ms
              FROM pg_catalog.unnest(v_msg_ids) WITH ORDINALITY AS o(id, pos)
              JOIN leased l ON l.id = o.id
             ORDER BY o.pos;
        -- The queue's counters, in the row this call has held since step 0.
        IF v_qc.queue IS NOT NULL THEN
            v_q_leased := pg_catalog.cardinality(v_msg_ids);
            SELECT pg_catalog.sum(least(u.cost, coalesce(v_qc.rate_burst, 1000000)::bigint)) INTO v_q_spent
              FROM pg_catalog.unnest(v_msg_costs) AS u(cost);
            v_q_level := v_q_level - v_q_spent * v_qc.rate_period_ms;
            UPDATE lonnymq_queue_config qc
               SET in_flight = qc.in_flight + CASE WHEN qc.max_concurrency IS NOT NULL THEN v_q_leased ELSE 0 END,
                   bucket_level = v_q_level,
                   last_release_at = v_now,
                   next_token_at = CASE WHEN v_q_level IS NULL THEN NULL
                                        WHEN v_q_level >= v_q_need * qc.rate_period_ms THEN v_now
                                        ELSE v_now + (v_q_need * qc.rate_period_ms - v_q_level + qc.rate_count - 1)
                                                     / qc.rate_count END
             WHERE qc.queue = p_queue;
        END IF;
    END IF;

    -- 4. Each picked channel's next turn: its next ready message, no earlier than now plus
    --    its release interval when it released something, nor before its bucket's next token.
    --    Leased per channel comes from step 2's pick ordinals: probing the message table
    --    with the id array once per channel cost 100 x 100 index probes per call.
    --    The aggregates read the rows in the subquery's pick order (one sort).
    SELECT pg_catalog.array_agg(n.channel_id), pg_catalog.array_agg(n.head), pg_catalog.array_agg(n.last_floor),
           pg_catalog.array_agg(n.leased), pg_catalog.array_agg(n.release_interval_ms),
           pg_catalog.array_agg(n.next_token_at), pg_catalog.array_agg(n.rate_count),
           pg_catalog.array_agg(n.rate_period_ms), pg_catalog.array_agg(n.spent), pg_catalog.array_agg(n.head_cost),
           pg_catalog.array_agg(n.hold_until)
      INTO v_next_ids, v_next_at, v_next_last, v_next_leased, v_intervals, v_next_token, v_rate_n, v_rate_period,
           v_next_spent, v_head_costs, v_holds
      FROM (
        SELECT p.channel_id, h.dequeue_at AS head, c.last_dequeue_at + c.release_interval_ms AS last_floor,
               coalesce(pg_catalog.cardinality(pg_catalog.array_positions(v_msg_ords, p.ord)), 0) AS leased,
               c.release_interval_ms, c.next_token_at, c.rate_count, c.rate_period_ms,
               -- The tokens its leases took (a bucket's channel only), and its next head's cost.
               CASE WHEN c.rate_count IS NOT NULL
                    THEN (SELECT coalesce(pg_catalog.sum(v_msg_costs[k.at]), 0)
                            FROM pg_catalog.unnest(pg_catalog.array_positions(v_msg_ords, p.ord)) AS k(at)) END AS spent,
               h.cost AS head_cost, c.hold_until
          FROM pg_catalog.unnest(v_ch_ids) WITH ORDINALITY AS p(channel_id, ord)
          -- "= ANY" gives the planner an index path (a plain join to unnest() is planned as a
          -- hash join over a sequential scan of every channel).
          JOIN lonnymq_channel c ON c.id = p.channel_id AND c.id = ANY (v_ch_ids)
          LEFT JOIN LATERAL (
              SELECT mm.dequeue_at, mm.cost FROM lonnymq_message mm
               WHERE mm.channel_id = p.channel_id AND mm.lease_until IS NULL
               ORDER BY mm.dequeue_at, mm.id LIMIT 1
          ) h ON true
         ORDER BY p.ord
      ) n;
    v_owed := pg_catalog.array_fill(false, ARRAY[v_n]);
    v_next_level := v_levels;

    FOR i IN 1 .. v_n LOOP
        -- A token bucket that released: its fill after these releases. When it released, or
        -- when its tokens do not pay for its next head's cost, its next token is due when
        -- they do (the channel's next turn is no earlier): a message that costs 10 waits
        -- for 10 tokens, not 1.
        IF v_levels[i] IS NOT NULL THEN
            v_level := v_levels[i] - v_next_spent[i] * v_rate_period[i];
            v_need := least(coalesce(v_head_costs[i], 1), v_bursts[i])::bigint * v_rate_period[i];
            IF v_next_leased[i] > 0 OR v_level < v_need THEN
                v_next_level[i] := v_level;
                v_next_token[i] := CASE WHEN v_level >= v_need THEN v_now
                                        ELSE v_now + (v_need - v_level + v_rate_n[i] - 1) / v_rate_n[i] END;
            END IF;
        END IF;
        IF v_next_leased[i] > 0 THEN
            v_floor := v_now + v_intervals[i];
        ELSE
            v_floor := greatest(v_now, coalesce(v_next_last[i], v_now));
        END IF;
        v_floor := greatest(v_floor, v_next_token[i], v_holds[i]);
        v_head := v_next_at[i];
        IF (v_cut_owed IS NOT NULL OR v_weight_sum > v_n) AND v_head <= v_now AND v_floor <= v_now
           AND (v_quotas[i] IS NULL OR v_next_leased[i] < v_quotas[i])
           AND ((v_next_leased[i] > 0 AND (v_used[i] + v_next_leased[i]) % v_weights[i] <> 0)
                OR i = ANY (v_cut_owed)) THEN
            -- Owed the rest of its round (weighted, or cut off by the batch): it keeps its
            -- place, so the next dequeue serves it first.
            v_owed[i] := true;
        ELSIF v_head IS NULL OR greatest(v_head, v_floor) > v_floor + p_tolerance_ms THEN
            -- Parking the channel, or moving it far ahead: only when no enqueue into it is
            -- in flight, and only after a second look with a snapshot taken after the lock.
            IF pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(v_next_ids[i]))
               AND pg_catalog.pg_try_advisory_xact_lock(lonnymq_stripe_lock_ns_v1(),
                                                        lonnymq_stripe_key_v1(v_next_ids[i])) THEN
                SELECT mm.dequeue_at INTO v_head FROM lonnymq_message mm
                 WHERE mm.channel_id = v_next_ids[i] AND mm.lease_until IS NULL
                 ORDER BY mm.dequeue_at, mm.id LIMIT 1;
                IF NOT FOUND THEN
                    v_head := NULL;
                END IF;
                v_next_at[i] := CASE WHEN v_head IS NULL THEN NULL ELSE greatest(v_head, v_floor) END;
            ELSE
                v_next_at[i] := least(coalesce(greatest(v_head, v_floor), v_now + p_recheck_ms), v_now + p_recheck_ms);
            END IF;
        ELSE
            v_next_at[i] := greatest(v_head, v_floor);
        END IF;
    END LOOP;

    -- 5. Write the picked channels. An owed channel keeps its turn and counts the releases
    --    of its round; every other one goes to the back and starts a new round.
    v_turn_base := pg_catalog.nextval('lonnymq_turn_seq') * 100000;
    UPDATE lonnymq_channel c
       SET next_dequeue_at = CASE WHEN u.owed THEN c.next_dequeue_at ELSE u.next_at END,
           turn = CASE WHEN u.owed THEN c.turn ELSE v_turn_base + u.ord END,
           round_used = CASE WHEN u.owed THEN (c.round_used + u.leased) % c.weight ELSE 0 END,
           last_dequeue_at = CASE WHEN u.leased > 0 THEN v_now ELSE c.last_dequeue_at END,
           released_total = c.released_total + u.leased,
           in_flight = c.in_flight + CASE WHEN c.max_concurrency IS NOT NULL THEN u.leased ELSE 0 END,
           bucket_level = CASE WHEN u.leased > 0 THEN u.level ELSE c.bucket_level END,
           next_token_at = u.token_at
      FROM ROWS FROM (pg_catalog.unnest(v_next_ids), pg_catalog.unnest(v_next_at), pg_catalog.unnest(v_next_leased),
                      pg_catalog.unnest(v_owed), pg_catalog.unnest(v_next_level), pg_catalog.unnest(v_next_token))
           WITH ORDINALITY AS u(channel_id, next_at, leased, owed, level, token_at, ord)
     WHERE c.id = u.channel_id AND c.id = ANY (v_next_ids);
END
$$;

-- Put locked, leased messages back as ready at their new dequeue_at, give their slots back
-- and wake their channels (taking each channel's shared advisory lock, like an enqueue).
-- A message someone asked to cancel is buried as 'cancelled' instead: it never runs again.
-- A message of an ordered channel keeps its place (its dequeue_at) and holds its channel
-- until the new time instead (hold_until), so nothing after it runs meanwhile.
CREATE OR REPLACE FUNCTION lonnymq_unlease_v1(
    p_ids bigint[], p_dequeue_ats bigint[], p_error text, p_uncount boolean, p_tolerance_ms bigint
) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_slots     bigint[];
    v_queue_slots bigint[];
    v_cancelled bigint[];
    v_ch        record;
    v_ordered   bigint[];
BEGIN
    -- Lock every channel row this call may touch, in id order, before touching any: giving
    -- slots back and waking channels must not take them in two different orders.
    SELECT pg_catalog.array_agg(l.id) FILTER (WHERE l.ordered) INTO v_ordered
      FROM (SELECT c.id, c.ordered FROM lonnymq_channel c
             WHERE c.id IN (SELECT m.channel_id FROM lonnymq_message m WHERE m.id = ANY (p_ids))
             ORDER BY c.id FOR NO KEY UPDATE) l;
    SELECT pg_catalog.array_agg(m.id) INTO v_cancelled
      FROM lonnymq_message m WHERE m.id = ANY (p_ids) AND m.cancel_requested;
    IF v_cancelled IS NOT NULL THEN
        PERFORM lonnymq_bury_v1(v_cancelled, 'cancelled', p_error);
    END IF;
    SELECT pg_catalog.array_agg(m.channel_id) FILTER (WHERE m.slot_taken),
           pg_catalog.array_agg(m.channel_id) FILTER (WHERE m.queue_slot) INTO v_slots, v_queue_slots
      FROM lonnymq_message m WHERE m.id = ANY (p_ids);
    IF v_ordered IS NOT NULL THEN
        -- Strict order: the channel waits until the latest new time of its messages here
        -- (a release's own time, which is past, holds nothing), and they keep their place.
        UPDATE lonnymq_channel c
           SET hold_until = CASE WHEN h.until > lonnymq_now_ms_v1() THEN h.until END
          FROM (SELECT m.channel_id, pg_catalog.max(u.dequeue_at) AS until
                  FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_dequeue_ats)) AS u(id, dequeue_at)
                  JOIN lonnymq_message m ON m.id = u.id AND m.id = ANY (p_ids)
                 WHERE m.channel_id = ANY (v_ordered) AND m.lease_until IS NOT NULL
                 GROUP BY m.channel_id) h
         WHERE c.id = h.channel_id AND c.blocked_by IS NULL;
    END IF;
    UPDATE lonnymq_message m
       SET lease_until = NULL, lease_token = NULL, leased_by = NULL, slot_taken = false, queue_slot = false,
           dequeue_at = CASE WHEN v_ordered IS NOT NULL AND m.channel_id = ANY (v_ordered)
                             THEN least(m.dequeue_at, u.dequeue_at) ELSE u.dequeue_at END,
           attempts = CASE WHEN p_uncount THEN greatest(m.attempts - 1, 0) ELSE m.attempts END,
           last_error = coalesce(p_error, m.last_error)
      FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_dequeue_ats)) AS u(id, dequeue_at)
     WHERE m.id = ANY (p_ids) AND m.id = u.id;
    IF v_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_slots_v1(v_slots);
    END IF;
    FOR v_ch IN
        SELECT m.channel_id, greatest(pg_catalog.min(m.dequeue_at), pg_catalog.max(c.hold_until)) AS dequeue_at,
               pg_catalog.min(c.queue) AS queue
          FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
         WHERE m.id = ANY (p_ids)
         GROUP BY m.channel_id ORDER BY m.channel_id
    LOOP
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(v_ch.channel_id));
        IF lonnymq_wake_v1(v_ch.channel_id, v_ch.dequeue_at, p_tolerance_ms) THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_ch.queue);
        END IF;
    END LOOP;
    IF v_queue_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_queue_slots_v1(v_queue_slots);
    END IF;
END
$$;

-- Move locked, leased messages to the dead-letter table and give their slots back. A message
-- someone asked to cancel is buried as 'cancelled' whatever ended it, unless it was discarded.
CREATE OR REPLACE FUNCTION lonnymq_bury_v1(p_ids bigint[], p_reason text, p_error text) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_slots bigint[];
    v_queue_slots bigint[];
    v_n integer;
    v_channels bigint[];
    v_dead bigint[];
BEGIN
    WITH gone AS (
        DELETE FROM lonnymq_message m WHERE m.id = ANY (p_ids)
        RETURNING m.*
    ), dead AS (
        INSERT INTO lonnymq_dead_message (id, channel_id, queue, channel, payload, priority, attempts,
                                          max_attempts, dedup_key, enqueued_at, reason, last_error, snoozes, cost)
        SELECT g.id, g.channel_id, c.queue, c.name, g.payload, g.priority, g.attempts, g.max_attempts,
               g.dedup_key, g.enqueued_at,
               CASE WHEN g.cancel_requested AND p_reason <> 'discarded' THEN 'cancelled' ELSE p_reason END,
               coalesce(p_error, g.last_error), g.snoozes, g.cost
          FROM gone g JOIN lonnymq_channel c ON c.id = g.channel_id
        RETURNING 1
    )
    SELECT pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.slot_taken),
           pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.queue_slot), (SELECT pg_catalog.count(*) FROM dead),
           pg_catalog.array_agg(g.channel_id ORDER BY g.id), pg_catalog.array_agg(g.id ORDER BY g.id)
      INTO v_slots, v_queue_slots, v_n, v_channels, v_dead FROM gone g;
    -- Strict order: a dead message blocks its ordered channel (the first one to die names
    -- it) until it is requeued or skipped. The channel rows are locked in id order first.
    IF EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.id = ANY (v_channels) AND c.ordered) THEN
        PERFORM 1 FROM lonnymq_channel c WHERE c.id = ANY (v_channels) ORDER BY c.id FOR NO KEY UPDATE;
        UPDATE lonnymq_channel c
           SET hold_until = 253402300799999, blocked_by = coalesce(c.blocked_by, b.id)
          FROM (SELECT u.channel_id, pg_catalog.min(u.id) AS id
                  FROM ROWS FROM (pg_catalog.unnest(v_channels), pg_catalog.unnest(v_dead)) AS u(channel_id, id)
                 GROUP BY u.channel_id) b
         WHERE c.id = b.channel_id AND c.id = ANY (v_channels) AND c.ordered;
    END IF;
    IF v_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_slots_v1(v_slots);
    END IF;
    IF v_queue_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_queue_slots_v1(v_queue_slots);
    END IF;
    RETURN coalesce(v_n, 0);
END
$$;

-- Move dead messages back into their channel (recreated if it was deleted), ready now.
-- Returns the ids requeued (a message keeps its id). A step of a cancelled workflow stays
-- dead and is left out of the result: run again, it would release nothing, and its workflow
-- would stay cancelled.
CREATE OR REPLACE FUNCTION lonnymq_requeue_dead_v1(
    p_ids bigint[], p_reset_attempts boolean DEFAULT true, p_tolerance_ms bigint DEFAULT 50
) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now bigint := lonnymq_now_ms_v1();
    v_row record;
    v_ids bigint[] := ARRAY[]::bigint[];
    v_channel_id bigint;
    v_locked bigint[];
    v_at bigint;
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    -- Channels first (created in name order if missing, then locked in id order), so
    -- requeues and enqueues over several channels take channel locks in one order.
    PERFORM lonnymq_channel_id_v1(x.queue, x.channel) FROM (
        SELECT DISTINCT d.queue, d.channel FROM lonnymq_dead_message d
         WHERE d.id = ANY (p_ids) ORDER BY d.queue, d.channel) x;
    SELECT pg_catalog.array_agg(l.id ORDER BY l.id) INTO v_locked
      FROM (SELECT c.id FROM lonnymq_channel c
              JOIN (SELECT DISTINCT d.queue, d.channel FROM lonnymq_dead_message d WHERE d.id = ANY (p_ids)) x
                ON c.queue = x.queue AND c.name = x.channel
             ORDER BY c.id FOR NO KEY UPDATE OF c) l;
    -- The producer's shared locks, at most 1,024 however many channels (a requeue of every
    -- dead letter of a queue with 100,000 tenants took one each, from the server's lock table).
    IF v_locked IS NOT NULL THEN
        PERFORM lonnymq_lock_channels_v1(v_locked);
    END IF;
    FOR v_row IN
        SELECT d.* FROM lonnymq_dead_message d WHERE d.id = ANY (p_ids) ORDER BY d.id FOR UPDATE
    LOOP
        IF pg_catalog.starts_with(v_row.dedup_key, 'lonnymq.step:') THEN
            -- The step's row first (a workflow's cancel locks its steps, then the workflow):
            -- the state read next, in a statement of its own, sees a cancel that committed
            -- while this waited; a cancel that starts now finds the step queued again.
            PERFORM 1 FROM lonnymq_workflow_step s WHERE s.id = v_row.id FOR UPDATE;
            IF EXISTS (SELECT 1 FROM lonnymq_workflow_step s JOIN lonnymq_workflow w ON w.id = s.workflow_id
                        WHERE s.id = v_row.id AND w.state = 'cancelled') THEN
                CONTINUE;
            END IF;
        END IF;
        v_channel_id := lonnymq_channel_id_v1(v_row.queue, v_row.channel);
        -- A channel deleted after the locks above and created again since has a new id.
        IF v_locked IS NULL OR v_channel_id <> ALL (v_locked) THEN
            PERFORM lonnymq_lock_channel_v1(v_channel_id);
        END IF;
        -- Held already, unless it was deleted after the lock above and created again since.
        PERFORM lonnymq_hold_channels_v1(ARRAY[v_channel_id]);
        -- Ready now; in an ordered channel, back at the head (no later than its first waiting
        -- message: the tie goes to the lower id, this one's), and a channel it blocked is free.
        v_at := v_now;
        IF EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.id = v_channel_id AND c.ordered) THEN
            SELECT least(v_now, coalesce(pg_catalog.min(h.dequeue_at), v_now)) INTO v_at
              FROM (SELECT mm.dequeue_at FROM lonnymq_message mm
                     WHERE mm.channel_id = v_channel_id AND mm.lease_until IS NULL
                     ORDER BY mm.dequeue_at, mm.id LIMIT 1) h;
            UPDATE lonnymq_channel c SET hold_until = NULL, blocked_by = NULL
             WHERE c.id = v_channel_id AND c.blocked_by = v_row.id;
        END IF;
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, attempts,
                                     max_attempts, dedup_key, enqueued_at, last_error, snoozes, cost)
        VALUES (v_row.id, v_channel_id, v_row.payload, v_at, v_row.priority,
                CASE WHEN p_reset_attempts THEN 0 ELSE v_row.attempts END,
                CASE WHEN p_reset_attempts THEN v_row.max_attempts
                     ELSE greatest(v_row.max_attempts, v_row.attempts + 1) END,
                v_row.dedup_key, v_row.enqueued_at, v_row.last_error,
                CASE WHEN p_reset_attempts THEN 0 ELSE v_row.snoozes END, v_row.cost);
        DELETE FROM lonnymq_dead_message d WHERE d.id = v_row.id;
        IF lonnymq_wake_v1(v_channel_id, v_at, p_tolerance_ms) THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_row.queue);
        END IF;
        v_ids := v_ids OPERATOR(pg_catalog.||) v_row.id;
    END LOOP;
    RETURN v_ids;
END
$$;

-- Scheduler invariants, for tests, api.check() and the health command. One row per problem:
--   in_flight_mismatch: in_flight differs from the leases that took a slot;
--   queue_in_flight_mismatch: a queue-wide cap's in_flight differs from the leases of the
--     queue that took a queue slot (channel_id and channel NULL);
--   stranded: a ready message is due but its channel will not look at it;
--   orphaned: messages whose channel row is missing (channel_id the missing id, queue and
--     channel NULL): lonnymq_message has no foreign key (0036), and this proves what it did.
--     The channels are read from the two message indexes (the ready index by skipping from
--     one channel to the next, the lease index whole), not from the backlog.
-- Its work does not grow with the backlog (docs/admin.md, "At size"): the leases are read
-- along the lease index (a slot or a queue slot needs a lease: CHECKs of lonnymq_message),
-- and only the channels that could be stranded have their head looked up: a channel whose
-- turn is at most now + grace away cannot be (the turn it waits for has come, or is within
-- grace), so the one-probe-per-channel walk is over the parked channels (no turn) and those
-- whose turn is further off. One clock reading serves the whole check.
CREATE OR REPLACE FUNCTION lonnymq_check_v2(p_grace_ms bigint DEFAULT 1000)
RETURNS TABLE (channel_id bigint, queue text, channel text, problem text, detail text)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
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
          LEFT JOIN (SELECT m.channel_id, pg_catalog.count(*) AS n FROM lonnymq_message m
                      WHERE m.lease_until IS NOT NULL AND m.slot_taken
                      GROUP BY m.channel_id) s ON s.channel_id = c.id
         WHERE c.in_flight <> coalesce(s.n, 0)
        UNION ALL
        SELECT NULL::bigint, qc.queue, NULL::text, 'queue_in_flight_mismatch',
               pg_catalog.format('in_flight=%s, slot-taking leases=%s', qc.in_flight, coalesce(s.n, 0))
          FROM lonnymq_queue_config qc
          LEFT JOIN (SELECT c.queue, pg_catalog.count(*) AS n
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
         WHERE NOT EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.id = o.channel_id);
END
$$;
