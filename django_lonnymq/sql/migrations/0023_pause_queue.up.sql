-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0023: pausing a whole queue.
-- - lonnymq_queue_config.paused (false by default); the row may now hold the pause alone
--   (CHECK lonnymq_queue_config_has_a_limit: a limit or the pause).
-- - lonnymq_pause_queue_v1 (new): pause or resume a queue (api.pause_queue / resume_queue).
-- - lonnymq_dequeue_v1 (same contract): a paused queue releases nothing; read on the row the
--   call already probes, so a queue no one paused pays nothing more.
-- - lonnymq_next_due_v1: a paused queue has no due time (idle workers do not poll it).
-- - lonnymq_configure_queue_v1 (same arguments and result): removing the last limit of a
--   paused queue keeps its row (the pause), and returns false.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

ALTER TABLE lonnymq_queue_config ADD COLUMN paused boolean NOT NULL DEFAULT false;
ALTER TABLE lonnymq_queue_config DROP CONSTRAINT lonnymq_queue_config_has_a_limit;
ALTER TABLE lonnymq_queue_config ADD CONSTRAINT lonnymq_queue_config_has_a_limit
    CHECK (max_concurrency IS NOT NULL OR rate_count IS NOT NULL OR paused);

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
    -- Cut to the batch. The channels whose round the cut interrupted are owed the rest of
    -- it: they keep their place in the rotation (step 4).
    IF pg_catalog.cardinality(v_msg_ids) > v_batch THEN
        SELECT pg_catalog.array_agg(DISTINCT o.ord) INTO v_cut_owed
          FROM ROWS FROM (pg_catalog.unnest(v_msg_ords), pg_catalog.unnest(v_msg_rounds)) WITH ORDINALITY AS o(ord, rnd, pos)
         WHERE o.pos > v_batch AND o.rnd = v_msg_rounds[v_batch];
        v_msg_ids := v_msg_ids[1:v_batch];
        v_msg_ords := v_msg_ords[1:v_batch];
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
            v_q_level := v_q_level - v_q_leased::bigint * v_qc.rate_period_ms;
            UPDATE lonnymq_queue_config qc
               SET in_flight = qc.in_flight + CASE WHEN qc.max_concurrency IS NOT NULL THEN v_q_leased ELSE 0 END,
                   bucket_level = v_q_level,
                   last_release_at = v_now,
                   next_token_at = CASE WHEN v_q_level IS NULL THEN NULL
                                        WHEN v_q_level >= qc.rate_period_ms THEN v_now
                                        ELSE v_now + (qc.rate_period_ms - v_q_level + qc.rate_count - 1) / qc.rate_count END
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
           pg_catalog.array_agg(n.rate_period_ms)
      INTO v_next_ids, v_next_at, v_next_last, v_next_leased, v_intervals, v_next_token, v_rate_n, v_rate_period
      FROM (
        SELECT p.channel_id, h.dequeue_at AS head, c.last_dequeue_at + c.release_interval_ms AS last_floor,
               coalesce(pg_catalog.cardinality(pg_catalog.array_positions(v_msg_ords, p.ord)), 0) AS leased,
               c.release_interval_ms, c.next_token_at, c.rate_count, c.rate_period_ms
          FROM pg_catalog.unnest(v_ch_ids) WITH ORDINALITY AS p(channel_id, ord)
          -- "= ANY" gives the planner an index path (a plain join to unnest() is planned as a
          -- hash join over a sequential scan of every channel).
          JOIN lonnymq_channel c ON c.id = p.channel_id AND c.id = ANY (v_ch_ids)
          LEFT JOIN LATERAL (
              SELECT mm.dequeue_at FROM lonnymq_message mm
               WHERE mm.channel_id = p.channel_id AND mm.lease_until IS NULL
               ORDER BY mm.dequeue_at, mm.id LIMIT 1
          ) h ON true
         ORDER BY p.ord
      ) n;
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
END
$$;
-- The earliest time any eligible channel of these queues may release (NULL: none queued).
-- Idle workers sleep until then, or until a notification wakes them. A queue at its
-- queue-wide cap has no such time (an ack that gives a slot back notifies), nor has a paused
-- queue (resuming notifies); a queue-wide bucket's next token comes first.
CREATE OR REPLACE FUNCTION lonnymq_next_due_v1(p_queues text[]) RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT pg_catalog.min(greatest(x.at, qc.next_token_at)) FROM pg_catalog.unnest(p_queues) AS q(name)
    LEFT JOIN lonnymq_queue_config qc ON qc.queue = q.name
    CROSS JOIN LATERAL (
        (SELECT c.next_dequeue_at AS at FROM lonnymq_channel c
          WHERE c.queue = q.name
            AND c.next_dequeue_at IS NOT NULL
            AND NOT c.paused
            AND (c.max_concurrency IS NULL OR c.in_flight < c.max_concurrency)
          ORDER BY c.next_dequeue_at LIMIT 1)
        UNION ALL
        -- A producer's committed mark: the next dequeue applies it.
        (SELECT w.dequeue_at FROM lonnymq_wake w WHERE w.queue = q.name ORDER BY w.dequeue_at LIMIT 1)
    ) x
    WHERE (qc.max_concurrency IS NULL OR qc.in_flight < qc.max_concurrency)
      AND qc.paused IS NOT TRUE
$$;
-- Set or change a queue's queue-wide limits: a NULL argument leaves that limit as it is
-- (p_unlimited removes the cap, p_no_rate the bucket); with no limit left the queue's row
-- is deleted and its dequeues pay nothing again, unless the queue is paused (the row then
-- keeps the pause alone). The row is locked (or created) first.
-- Setting a cap where there was none counts the queue's leases already running (claimed
-- with SKIP LOCKED: a locked one is leaving flight, and waiting on it could deadlock with
-- its ack), so the cap holds at once. A new or changed rate starts with a full bucket.
-- Returns whether the queue has a limit now.
CREATE OR REPLACE FUNCTION lonnymq_configure_queue_v1(
    p_queue text, p_max_concurrency integer DEFAULT NULL, p_unlimited boolean DEFAULT false,
    p_rate_count integer DEFAULT NULL, p_rate_period_ms bigint DEFAULT NULL, p_rate_burst integer DEFAULT NULL,
    p_no_rate boolean DEFAULT false
) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_old      lonnymq_queue_config%ROWTYPE;
    v_new_rate boolean;
    v_max      integer;
    v_count    integer;
    v_period   bigint;
    v_burst    integer;
    v_in_flight integer;
BEGIN
    IF p_queue IS NULL OR pg_catalog.char_length(p_queue) NOT BETWEEN 1 AND 100 OR p_queue !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('queue', 'must be 1 to 100 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_queue));
    END IF;
    IF p_max_concurrency IS NOT NULL AND p_max_concurrency < 1 THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'must be positive or null (unlimited)', p_max_concurrency::text);
    END IF;
    IF p_max_concurrency IS NOT NULL AND coalesce(p_unlimited, false) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'cannot be combined with unlimited', p_max_concurrency::text);
    END IF;
    v_new_rate := p_rate_count IS NOT NULL OR p_rate_period_ms IS NOT NULL OR p_rate_burst IS NOT NULL;
    IF v_new_rate THEN
        IF coalesce(p_no_rate, false) THEN
            PERFORM lonnymq_raise_invalid_v1('rate', 'cannot be combined with no_rate', p_rate_count::text);
        END IF;
        PERFORM lonnymq_check_range_v1('rate_count', p_rate_count::bigint, 1::bigint, 1000000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_period_ms', p_rate_period_ms, 1::bigint, 31622400000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_burst', p_rate_burst::bigint, 1::bigint, 1000000::bigint, false);
    END IF;
    -- Two first configurations of one queue must not both count its leases: the second
    -- waits for the first (an advisory lock on the queue's name, beside the channels' ones).
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_lock_ns_v1() + 1, pg_catalog.hashtext(p_queue));
    SELECT * INTO v_old FROM lonnymq_queue_config qc WHERE qc.queue = p_queue FOR NO KEY UPDATE;
    v_max := CASE WHEN coalesce(p_unlimited, false) THEN NULL
                  ELSE coalesce(p_max_concurrency, v_old.max_concurrency) END;
    v_count := CASE WHEN v_new_rate THEN p_rate_count WHEN p_no_rate THEN NULL ELSE v_old.rate_count END;
    v_period := CASE WHEN v_new_rate THEN p_rate_period_ms WHEN p_no_rate THEN NULL ELSE v_old.rate_period_ms END;
    v_burst := CASE WHEN v_new_rate THEN p_rate_burst WHEN p_no_rate THEN NULL ELSE v_old.rate_burst END;
    PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    IF v_max IS NULL AND v_count IS NULL AND v_old.paused IS NOT TRUE THEN
        DELETE FROM lonnymq_queue_config qc WHERE qc.queue = p_queue;
        RETURN false;
    END IF;
    IF v_max IS NULL THEN
        v_in_flight := 0;
    ELSIF v_old.max_concurrency IS NULL THEN
        UPDATE lonnymq_message m SET queue_slot = true
         WHERE m.id IN (SELECT mm.id FROM lonnymq_message mm
                          JOIN lonnymq_channel c ON c.id = mm.channel_id
                         WHERE mm.lease_until IS NOT NULL AND c.queue = p_queue AND NOT mm.queue_slot
                           FOR UPDATE OF mm SKIP LOCKED);
        -- A new statement: it sees the leases just claimed and those flagged before (an ack
        -- of one of these that is under way gives its slot back after this commits).
        SELECT pg_catalog.count(*)::integer INTO v_in_flight
          FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
         WHERE m.queue_slot AND c.queue = p_queue;
    ELSE
        v_in_flight := v_old.in_flight;
    END IF;
    INSERT INTO lonnymq_queue_config AS qc (queue, max_concurrency, rate_count, rate_period_ms, rate_burst, in_flight,
                                            paused)
    VALUES (p_queue, v_max, v_count, v_period, v_burst, v_in_flight, coalesce(v_old.paused, false))
    ON CONFLICT (queue) DO UPDATE
       SET max_concurrency = excluded.max_concurrency,
           rate_count = excluded.rate_count,
           rate_period_ms = excluded.rate_period_ms,
           rate_burst = excluded.rate_burst,
           in_flight = excluded.in_flight,
           bucket_level = CASE WHEN v_new_rate OR p_no_rate THEN NULL ELSE qc.bucket_level END,
           next_token_at = CASE WHEN v_new_rate OR p_no_rate THEN NULL ELSE qc.next_token_at END,
           updated_at = pg_catalog.now();
    RETURN v_max IS NOT NULL OR v_count IS NOT NULL;
END
$$;
-- Pause (p_paused) or resume a whole queue: its dequeues release nothing while it is paused;
-- enqueues, publishes and schedule ticks still write, and running messages finish. A queue
-- is a name: pausing one nothing has used yet is allowed (it is paused when work comes).
-- The pause lives on the queue's lonnymq_queue_config row (created if missing); resuming
-- deletes the row when it holds no limit, so an unpaused queue without limits costs its
-- dequeues one index probe, as before. Serialized with configure_queue (the same advisory
-- lock, then the row lock, which waits for a dequeue holding it). Resuming wakes idle
-- workers. Returns whether the state changed.
CREATE FUNCTION lonnymq_pause_queue_v1(p_queue text, p_paused boolean) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_old lonnymq_queue_config%ROWTYPE;
BEGIN
    IF p_queue IS NULL OR pg_catalog.char_length(p_queue) NOT BETWEEN 1 AND 100 OR p_queue !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('queue', 'must be 1 to 100 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_queue));
    END IF;
    IF p_paused IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('paused', 'must be true or false', 'NULL');
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_lock_ns_v1() + 1, pg_catalog.hashtext(p_queue));
    SELECT * INTO v_old FROM lonnymq_queue_config qc WHERE qc.queue = p_queue FOR NO KEY UPDATE;
    IF coalesce(v_old.paused, false) = p_paused THEN
        RETURN false;
    END IF;
    IF p_paused THEN
        INSERT INTO lonnymq_queue_config AS qc (queue, paused) VALUES (p_queue, true)
        ON CONFLICT (queue) DO UPDATE SET paused = true, updated_at = pg_catalog.now();
        RETURN true;
    END IF;
    IF v_old.max_concurrency IS NULL AND v_old.rate_count IS NULL THEN
        DELETE FROM lonnymq_queue_config qc WHERE qc.queue = p_queue;
    ELSE
        UPDATE lonnymq_queue_config qc SET paused = false, updated_at = pg_catalog.now()
         WHERE qc.queue = p_queue;
    END IF;
    PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    RETURN true;
END
$$;