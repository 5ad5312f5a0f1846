-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0010: weighted channels and token buckets.
-- - lonnymq_channel.weight: under backlog a channel releases `weight` messages per round
--   (round_used counts the releases of the round it is part-way through; a channel owed the
--   rest of its round keeps its place in the rotation).
-- - A token bucket per channel (rate_count per rate_period_ms, burst rate_burst): the
--   bucket's fill after the last release and the time its next token is due, which every
--   writer of next_dequeue_at takes as a floor beside the release interval.
-- - lonnymq_configure_channel_v3 sets weight and rate too; v2 calls it.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

ALTER TABLE lonnymq_channel
    ADD COLUMN weight         integer NOT NULL DEFAULT 1,
    ADD COLUMN round_used     integer NOT NULL DEFAULT 0,
    ADD COLUMN rate_count     integer NULL,
    ADD COLUMN rate_period_ms bigint  NULL,
    ADD COLUMN rate_burst     integer NULL,
    ADD COLUMN bucket_level   bigint  NULL,
    ADD COLUMN next_token_at  bigint  NULL,
    ADD CONSTRAINT lonnymq_channel_weight_range CHECK (weight BETWEEN 1 AND 1000),
    ADD CONSTRAINT lonnymq_channel_round_used_range CHECK (round_used >= 0 AND round_used < weight),
    ADD CONSTRAINT lonnymq_channel_rate_complete
        CHECK ((rate_count IS NULL) = (rate_period_ms IS NULL) AND (rate_count IS NULL) = (rate_burst IS NULL)),
    ADD CONSTRAINT lonnymq_channel_rate_count_range CHECK (rate_count BETWEEN 1 AND 1000000),
    ADD CONSTRAINT lonnymq_channel_rate_period_range CHECK (rate_period_ms BETWEEN 1 AND 31622400000),
    ADD CONSTRAINT lonnymq_channel_rate_burst_range CHECK (rate_burst BETWEEN 1 AND 1000000),
    ADD CONSTRAINT lonnymq_channel_bucket_level_nonnegative CHECK (bucket_level >= 0);

-- Make sure a channel will look at a message that becomes ready at p_dequeue_at.
-- Lowers next_dequeue_at only when it must (more than p_tolerance_ms later than needed), so
-- enqueues into a busy channel take no row lock. The caller holds the channel's shared
-- advisory lock (see docs/locking.md). Under REPEATABLE READ or SERIALIZABLE the lowering is
-- unconditional: the row lock then keeps dequeuers from parking the channel until commit.
CREATE OR REPLACE FUNCTION lonnymq_wake_v1(p_channel_id bigint, p_dequeue_at bigint, p_tolerance_ms bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        UPDATE lonnymq_channel c
           SET next_dequeue_at = greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at),
               turn = pg_catalog.nextval('lonnymq_turn_seq') * 100000
         WHERE c.id = p_channel_id
           AND (c.next_dequeue_at IS NULL
                OR c.next_dequeue_at > greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at)
                                       + p_tolerance_ms);
    ELSE
        UPDATE lonnymq_channel c
           SET next_dequeue_at = least(
                   coalesce(c.next_dequeue_at, 9223372036854775807),
                   greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at)),
               turn = CASE WHEN c.next_dequeue_at IS NULL
                             OR c.next_dequeue_at > greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at)
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
        SELECT c.next_dequeue_at, greatest(c.last_dequeue_at + c.release_interval_ms, c.next_token_at) INTO v_next, v_floor
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
             OR c.next_dequeue_at > greatest(u.at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at) + p_tolerance_ms)
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
-- ever earlier) and delete them. Marks whose channel row another session holds stay for
-- the next call; nothing here waits.
CREATE OR REPLACE FUNCTION lonnymq_apply_marks_v1(p_queue text, p_tolerance_ms bigint) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_ids bigint[];
    v_ats bigint[];
BEGIN
    WITH marks AS (
        SELECT w.id, w.channel_id, w.dequeue_at
          FROM lonnymq_wake w
          JOIN lonnymq_channel c ON c.id = w.channel_id
         WHERE w.queue = p_queue
         ORDER BY w.dequeue_at
         LIMIT 10000
           FOR UPDATE OF w SKIP LOCKED
           FOR NO KEY UPDATE OF c SKIP LOCKED
    ), gone AS (
        DELETE FROM lonnymq_wake w WHERE w.id IN (SELECT m.id FROM marks m)
        RETURNING w.channel_id, w.dequeue_at
    )
    SELECT pg_catalog.array_agg(g.channel_id ORDER BY g.channel_id), pg_catalog.array_agg(g.at ORDER BY g.channel_id)
      INTO v_ids, v_ats
      FROM (SELECT channel_id, pg_catalog.min(dequeue_at) AS at FROM gone GROUP BY channel_id) g;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    UPDATE lonnymq_channel c
       SET next_dequeue_at = greatest(u.at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at),
           turn = pg_catalog.nextval('lonnymq_turn_seq') * 100000
      FROM ROWS FROM (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_ats)) AS u(id, at)
     WHERE c.id = u.id AND c.id = ANY (v_ids)
       AND (c.next_dequeue_at IS NULL
            OR c.next_dequeue_at > greatest(u.at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at) + p_tolerance_ms);
END
$$;

-- Lease up to p_batch_size messages of one queue, round robin across its channels.
-- Picks up to p_batch_size eligible channels (SKIP LOCKED), splits the batch fairly across
-- them (capped by free concurrency slots and rate limits: a release interval releases one,
-- a token bucket as many as it holds tokens), leases each picked channel's first ready
-- messages, and moves every picked channel to its next turn. A channel of weight w takes w
-- messages per round. Rows come back in round-robin order: the first round of each channel
-- in pick order, then the second, and so on.
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

    -- 1. Pick channels whose turn has come, in round-robin order; skip those another
    --    dequeuer holds. NO KEY UPDATE does not conflict with the KEY SHARE locks that
    --    producers' foreign-key checks hold on the channel row.
    --    SKIP LOCKED does not apply where PostgreSQL follows a channel row's update chain
    --    ("while locking updated version of tuple"): two dequeuers can then wait on each
    --    other until deadlock_timeout (1 s) kills one. A short lock timeout turns that into
    --    an empty batch after 20 ms; the worker simply asks again.
    --    room: what the channel's limits let it release now. level: a token bucket's fill
    --    now (in token x period units; one release costs rate_period_ms of them), refilled
    --    at rate_count units per ms since the last release, up to rate_burst tokens.
    v_lock_timeout := pg_catalog.current_setting('lock_timeout');
    PERFORM pg_catalog.set_config('lock_timeout', '20ms', true);
    BEGIN
        -- 0. Producers' committed wake-up marks lower their channels' next turn first.
        IF EXISTS (SELECT 1 FROM lonnymq_wake w WHERE w.queue = p_queue) THEN
            PERFORM lonnymq_apply_marks_v1(p_queue, p_tolerance_ms);
        END IF;
        SELECT pg_catalog.array_agg(p.id ORDER BY p.next_dequeue_at, p.turn),
               pg_catalog.array_agg(p.name ORDER BY p.next_dequeue_at, p.turn),
               pg_catalog.array_agg(CASE WHEN p.level IS NULL THEN p.room
                                         ELSE least(p.room::bigint, p.level / p.rate_period_ms)::integer END
                                    ORDER BY p.next_dequeue_at, p.turn),
               pg_catalog.array_agg(p.id) FILTER (WHERE p.max_concurrency IS NOT NULL),
               pg_catalog.array_agg(p.weight ORDER BY p.next_dequeue_at, p.turn),
               pg_catalog.array_agg(p.round_used ORDER BY p.next_dequeue_at, p.turn),
               pg_catalog.array_agg(p.level ORDER BY p.next_dequeue_at, p.turn),
               pg_catalog.sum(p.weight - p.round_used), pg_catalog.sum(p.weight)
          INTO v_ch_ids, v_ch_names, v_quotas, v_limited, v_weights, v_used, v_levels,
               v_rounds_first, v_weight_sum
          FROM (
            SELECT c.id, c.name, c.next_dequeue_at, c.turn, c.max_concurrency, c.weight, c.round_used,
                   c.rate_period_ms,
                   -- NULL: no limit but the batch.
                   CASE WHEN c.release_interval_ms > 0 THEN 1
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
             LIMIT p_batch_size
               FOR NO KEY UPDATE OF c SKIP LOCKED
          ) p;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
        RETURN;
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
    v_n := coalesce(pg_catalog.cardinality(v_ch_ids), 0);
    IF v_n = 0 THEN
        RETURN;
    END IF;

    -- 2. Candidate messages: each picked channel's first ready ones, in rounds: a channel of
    --    weight w takes w per round (fewer in the first round when it is part-way through
    --    one). Enough rounds for a full batch if every channel had a backlog (with weights
    --    1: ceil(batch / channels) each, as a plain round robin), capped by the room. Then
    --    the batch is cut in round-robin order (round, pick order, rank).
    v_rounds := pg_catalog.ceil(greatest(p_batch_size - v_rounds_first, 0)::numeric / v_weight_sum::numeric)::bigint;
    SELECT pg_catalog.array_agg(x.id ORDER BY x.rnd, x.ord, x.rank),
           pg_catalog.array_agg(x.ord ORDER BY x.rnd, x.ord, x.rank),
           pg_catalog.array_agg(x.rnd ORDER BY x.rnd, x.ord, x.rank)
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
                                   p_batch_size::bigint)
                         FOR UPDATE OF mm SKIP LOCKED) q
          ) m
      ) x;
    -- Cut to the batch. The channels whose round the cut interrupted are owed the rest of
    -- it: they keep their place in the rotation (step 4).
    IF pg_catalog.cardinality(v_msg_ids) > p_batch_size THEN
        SELECT pg_catalog.array_agg(DISTINCT o.ord) INTO v_cut_owed
          FROM ROWS FROM (pg_catalog.unnest(v_msg_ords), pg_catalog.unnest(v_msg_rounds)) WITH ORDINALITY AS o(ord, rnd, pos)
         WHERE o.pos > p_batch_size AND o.rnd = v_msg_rounds[p_batch_size];
        v_msg_ids := v_msg_ids[1:p_batch_size];
        v_msg_ords := v_msg_ords[1:p_batch_size];
    END IF;

    -- 3. Lease them (matched by id array: a join here is planned as a full scan).
    IF v_msg_ids IS NOT NULL THEN
        UPDATE lonnymq_message m
           SET lease_until = v_now + p_lease_ms,
               lease_token = v_token,
               leased_by = p_worker,
               attempts = m.attempts + 1,
               slot_taken = (v_limited IS NOT NULL AND m.channel_id = ANY (v_limited))
         WHERE m.id = ANY (v_msg_ids);
    END IF;

    -- 4. Each picked channel's next turn: its next ready message, no earlier than now plus
    --    its release interval when it released something, nor before its bucket's next token.
    --    Leased per channel comes from step 2's pick ordinals: probing the message table
    --    with the id array once per channel cost 100 x 100 index probes per call.
    SELECT pg_catalog.array_agg(p.channel_id ORDER BY p.ord),
           pg_catalog.array_agg(h.dequeue_at ORDER BY p.ord),
           pg_catalog.array_agg(c.last_dequeue_at + c.release_interval_ms ORDER BY p.ord),
           pg_catalog.array_agg(coalesce(pg_catalog.cardinality(pg_catalog.array_positions(v_msg_ords, p.ord)), 0) ORDER BY p.ord),
           pg_catalog.array_agg(c.release_interval_ms ORDER BY p.ord),
           pg_catalog.array_agg(c.next_token_at ORDER BY p.ord),
           pg_catalog.array_agg(c.rate_count ORDER BY p.ord),
           pg_catalog.array_agg(c.rate_period_ms ORDER BY p.ord)
      INTO v_next_ids, v_next_at, v_next_last, v_next_leased, v_intervals, v_next_token, v_rate_n, v_rate_period
      FROM pg_catalog.unnest(v_ch_ids) WITH ORDINALITY AS p(channel_id, ord)
      -- "= ANY" gives the planner an index path (a plain join to unnest() is planned as a
      -- hash join over a sequential scan of every channel).
      JOIN lonnymq_channel c ON c.id = p.channel_id AND c.id = ANY (v_ch_ids)
      LEFT JOIN LATERAL (
          SELECT mm.dequeue_at FROM lonnymq_message mm
           WHERE mm.channel_id = p.channel_id AND mm.lease_until IS NULL
           ORDER BY mm.dequeue_at, mm.id LIMIT 1
      ) h ON true;
    v_owed := pg_catalog.array_fill(false, ARRAY[v_n]);
    v_next_level := v_levels;

    FOR i IN 1 .. v_n LOOP
        -- A token bucket that released: its fill after these releases, and when its next
        -- token is due (the channel's next turn is no earlier).
        IF v_levels[i] IS NOT NULL AND v_next_leased[i] > 0 THEN
            v_level := v_levels[i] - v_next_leased[i]::bigint * v_rate_period[i];
            v_next_level[i] := v_level;
            v_next_token[i] := CASE WHEN v_level >= v_rate_period[i] THEN v_now
                                    ELSE v_now + (v_rate_period[i] - v_level + v_rate_n[i] - 1) / v_rate_n[i] END;
        END IF;
        IF v_next_leased[i] > 0 THEN
            v_floor := v_now + v_intervals[i];
        ELSE
            v_floor := greatest(v_now, coalesce(v_next_last[i], v_now));
        END IF;
        v_floor := greatest(v_floor, v_next_token[i]);
        v_head := v_next_at[i];
        IF v_head <= v_now AND v_floor <= v_now
           AND (v_quotas[i] IS NULL OR v_next_leased[i] < v_quotas[i])
           AND ((v_next_leased[i] > 0 AND (v_used[i] + v_next_leased[i]) % v_weights[i] <> 0)
                OR i = ANY (v_cut_owed)) THEN
            -- Owed the rest of its round (weighted, or cut off by the batch): it keeps its
            -- place, so the next dequeue serves it first.
            v_owed[i] := true;
        ELSIF v_head IS NULL OR greatest(v_head, v_floor) > v_floor + p_tolerance_ms THEN
            -- Parking the channel, or moving it far ahead: only when no enqueue into it is
            -- in flight, and only after a second look with a snapshot taken after the lock.
            IF pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(v_next_ids[i])) THEN
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
           next_token_at = CASE WHEN u.leased > 0 THEN u.token_at ELSE c.next_token_at END
      FROM ROWS FROM (pg_catalog.unnest(v_next_ids), pg_catalog.unnest(v_next_at), pg_catalog.unnest(v_next_leased),
                      pg_catalog.unnest(v_owed), pg_catalog.unnest(v_next_level), pg_catalog.unnest(v_next_token))
           WITH ORDINALITY AS u(channel_id, next_at, leased, owed, level, token_at, ord)
     WHERE c.id = u.channel_id AND c.id = ANY (v_next_ids);

    IF v_msg_ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT m.id, ch.name, m.payload, m.attempts, m.max_attempts, m.priority, m.dedup_key,
               m.enqueued_at, m.lease_token, m.lease_until
          FROM pg_catalog.unnest(v_msg_ids) WITH ORDINALITY AS o(id, pos)
          JOIN lonnymq_message m ON m.id = o.id
          JOIN lonnymq_channel ch ON ch.id = m.channel_id
         ORDER BY o.pos;
END
$$;

-- Create a channel or change the limits given: a NULL argument leaves that limit as it is
-- (p_unlimited removes the concurrency cap, p_no_rate the token bucket). A rate is given
-- whole (count, period and burst). The channel row is locked before its limits are read,
-- so an edit of one limit never overwrites a concurrent change of another.
-- Setting a limit on a channel that had none starts counting the leases already running, so
-- the limit holds at once. Their message rows are claimed with SKIP LOCKED after the channel
-- row is locked: a message locked right now is being acked, failed or reaped, i.e. leaving
-- flight, and waiting on it could deadlock with an ack (message row, then channel row).
-- A new or changed rate starts with a full bucket; a new weight starts a new round.
CREATE FUNCTION lonnymq_configure_channel_v3(
    p_queue text, p_channel text, p_max_concurrency integer DEFAULT NULL, p_unlimited boolean DEFAULT false,
    p_release_interval_ms bigint DEFAULT NULL, p_paused boolean DEFAULT NULL, p_weight integer DEFAULT NULL,
    p_rate_count integer DEFAULT NULL, p_rate_period_ms bigint DEFAULT NULL, p_rate_burst integer DEFAULT NULL,
    p_no_rate boolean DEFAULT false
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id       bigint;
    v_head     bigint;
    v_old      lonnymq_channel%ROWTYPE;
    v_counted  integer := 0;
    v_max      integer;
    v_interval bigint;
    v_new_rate boolean;
BEGIN
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
    PERFORM lonnymq_check_names_v1(p_queue, p_channel);
    v_id := lonnymq_channel_id_v1(p_queue, p_channel);
    SELECT * INTO v_old FROM lonnymq_channel c WHERE c.id = v_id FOR NO KEY UPDATE;
    v_max := CASE WHEN coalesce(p_unlimited, false) THEN NULL
                  ELSE coalesce(p_max_concurrency, v_old.max_concurrency) END;
    v_interval := coalesce(p_release_interval_ms, v_old.release_interval_ms);
    IF v_old.max_concurrency IS NULL AND v_max IS NOT NULL THEN
        WITH claimed AS (
            UPDATE lonnymq_message m SET slot_taken = true
             WHERE m.id IN (SELECT mm.id FROM lonnymq_message mm
                             WHERE mm.lease_until IS NOT NULL AND mm.channel_id = v_id AND NOT mm.slot_taken
                               FOR UPDATE SKIP LOCKED)
            RETURNING 1
        )
        SELECT pg_catalog.count(*) INTO v_counted FROM claimed;
    END IF;
    SELECT mm.dequeue_at INTO v_head FROM lonnymq_message mm
     WHERE mm.channel_id = v_id AND mm.lease_until IS NULL ORDER BY mm.dequeue_at, mm.id LIMIT 1;
    UPDATE lonnymq_channel c
       SET max_concurrency = v_max,
           release_interval_ms = v_interval,
           paused = coalesce(p_paused, c.paused),
           in_flight = c.in_flight + v_counted,
           weight = coalesce(p_weight, c.weight),
           round_used = CASE WHEN p_weight IS NULL OR p_weight = c.weight THEN c.round_used ELSE 0 END,
           rate_count = CASE WHEN v_new_rate THEN p_rate_count WHEN p_no_rate THEN NULL ELSE c.rate_count END,
           rate_period_ms = CASE WHEN v_new_rate THEN p_rate_period_ms WHEN p_no_rate THEN NULL ELSE c.rate_period_ms END,
           rate_burst = CASE WHEN v_new_rate THEN p_rate_burst WHEN p_no_rate THEN NULL ELSE c.rate_burst END,
           bucket_level = CASE WHEN v_new_rate OR p_no_rate THEN NULL ELSE c.bucket_level END,
           next_token_at = CASE WHEN v_new_rate OR p_no_rate THEN NULL ELSE c.next_token_at END,
           next_dequeue_at = CASE WHEN v_head IS NULL THEN c.next_dequeue_at
                                  ELSE least(coalesce(c.next_dequeue_at, v_head),
                                             greatest(v_head, c.last_dequeue_at + v_interval,
                                                      CASE WHEN v_new_rate OR p_no_rate THEN NULL
                                                           ELSE c.next_token_at END)) END
     WHERE c.id = v_id;
    PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    RETURN v_id;
END
$$;

-- Create a channel or change the limits given (the form before weights and token buckets):
-- the same as lonnymq_configure_channel_v3 with weight and rate left as they are.
CREATE OR REPLACE FUNCTION lonnymq_configure_channel_v2(
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

-- Scheduler invariants, for tests and the health command. One row per problem:
--   in_flight_mismatch: in_flight differs from the leases that took a slot;
--   stranded: a ready message is due but its channel will not look at it.
CREATE OR REPLACE FUNCTION lonnymq_check_v1(p_grace_ms bigint DEFAULT 1000)
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
