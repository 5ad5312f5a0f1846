-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0038: the plans of the calls a worker makes for every batch no longer
-- depend on how big the tables looked when they were planned. Same names, arguments and
-- results for all six functions.
-- - lonnymq_dequeue_v1, lonnymq_dequeue_held_v1, lonnymq_ack_v1, lonnymq_workflow_release_v2,
--   lonnymq_workflow_ack_v2 and lonnymq_workflow_inputs_v1: SET enable_seqscan = off and
--   SET jit = off. Their generic plans last a session (until the table's next VACUUM or
--   ANALYZE); one made while the message table held a row or two scanned all of it: a
--   worker that planned its dequeue on a one-row table took 130 ms to lease 50 of 200,000
--   messages, against 2 ms for one that planned later. A plan that cannot avoid a node a
--   setting disables costs past jit_above_cost: JIT compiling it took about 90 ms a call.
-- - lonnymq_workflow_ack_v2 also: the acked steps' children are locked by their ids ("= ANY")
--   and matched to their counts without a nested loop (SET enable_nestloop = off); whether
--   their workflow was cancelled is read once per call (no join to lonnymq_workflow). Planned
--   while the tables looked small, the join read every child once per child: a 1,000-child
--   release took 20 to 60 ms, growing with the square of the fan-out. The counts' and the
--   workflows' updates also match by "= ANY".
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- A dequeue that found no due channel it could lock: every due channel is held by another
-- dequeuer (or waiting on one's row made lonnymq_dequeue_v1 give up). The due channels that
-- have no limit (no concurrency cap, no release interval, no token bucket, not paused) are
-- served anyway: their next ready messages are leased through SKIP LOCKED on the message
-- rows alone, without the channel row, so a busy channel has as many dequeuers at once as
-- there are workers. Nothing on such a channel's row depends on one release: its holder still moves
-- its turn (and parks it only after a look at its messages), and the count goes to
-- lonnymq_release_count. Round robin is not at stake: every due channel is being served at
-- this moment (docs/locking.md). The batch is split evenly across the channels in their
-- round-robin order (weights are not at stake either). Never waits.
CREATE OR REPLACE FUNCTION lonnymq_dequeue_held_v1(
    p_queue      text,
    p_batch_size integer,
    p_now        bigint,
    p_lease_ms   bigint,
    p_worker     text,
    p_token      uuid
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
    v_seen     bigint[];
    v_ch_ids   bigint[];
    v_ch_names text[];
    v_msg_ids  bigint[];
    v_msg_ords bigint[];
    v_share    integer;
BEGIN
    -- Due channels without limits, in round-robin order, read without a lock: due by their
    -- turn, or by a committed wake-up mark that another dequeuer is applying right now.
    SELECT pg_catalog.array_agg(d.id ORDER BY d.at, d.turn) INTO v_seen
      FROM (SELECT DISTINCT ON (x.id) x.id, x.at, x.turn
              FROM ((SELECT c.id, c.next_dequeue_at AS at, c.turn FROM lonnymq_channel c
                      WHERE c.queue = p_queue
                        AND c.next_dequeue_at <= p_now
                        AND c.next_dequeue_at IS NOT NULL
                        AND NOT c.paused
                        AND (c.max_concurrency IS NULL OR c.in_flight < c.max_concurrency)
                        AND c.max_concurrency IS NULL
                        AND c.release_interval_ms = 0
                        AND c.rate_count IS NULL
                      ORDER BY c.next_dequeue_at, c.turn
                      LIMIT p_batch_size)
                    UNION ALL
                    (SELECT c.id, m.dequeue_at AS at, c.turn
                       FROM lonnymq_marks_due_v1(p_queue, p_now, p_batch_size) m
                       JOIN lonnymq_channel c ON c.id = m.channel_id
                      WHERE NOT c.paused
                        AND c.max_concurrency IS NULL
                        AND c.release_interval_ms = 0
                        AND c.rate_count IS NULL)) x
             ORDER BY x.id, x.at) d;
    IF v_seen IS NULL THEN
        RETURN;
    END IF;
    -- Say that leases without the row are being taken (a change of the channel's limits
    -- waits for this transaction), then read the limits again in a new statement, whose
    -- snapshot is taken after the lock: a limit set meanwhile is seen, or its change waits.
    -- (Only the limits: a channel's turn says nothing a ready message does not, when it has
    -- no limit.)
    SELECT pg_catalog.array_agg(u.id ORDER BY u.ord) INTO v_seen
      FROM pg_catalog.unnest(v_seen) WITH ORDINALITY AS u(id, ord)
     WHERE pg_catalog.pg_try_advisory_xact_lock_shared(lonnymq_lease_lock_ns_v1(), lonnymq_lock_key_v1(u.id));
    SELECT pg_catalog.array_agg(u.id ORDER BY u.ord), pg_catalog.array_agg(c.name ORDER BY u.ord)
      INTO v_ch_ids, v_ch_names
      FROM pg_catalog.unnest(v_seen) WITH ORDINALITY AS u(id, ord)
      JOIN lonnymq_channel c ON c.id = u.id AND c.id = ANY (v_seen)
     WHERE NOT c.paused
       AND c.max_concurrency IS NULL
       AND c.release_interval_ms = 0
       AND c.rate_count IS NULL;
    IF v_ch_ids IS NULL THEN
        RETURN;
    END IF;
    v_share := pg_catalog.ceil(p_batch_size::numeric / pg_catalog.cardinality(v_ch_ids)::numeric)::integer;

    SELECT pg_catalog.array_agg(x.id ORDER BY x.rank, x.ord), pg_catalog.array_agg(x.ord ORDER BY x.rank, x.ord)
      INTO v_msg_ids, v_msg_ords
      FROM (
        SELECT m.id, m.rank, p.ord
          FROM pg_catalog.unnest(v_ch_ids) WITH ORDINALITY AS p(channel_id, ord)
          CROSS JOIN LATERAL (
              SELECT q.id, pg_catalog.row_number() OVER (ORDER BY q.dequeue_at, q.id) AS rank
                FROM (SELECT mm.id, mm.dequeue_at
                        FROM lonnymq_message mm
                       WHERE mm.channel_id = p.channel_id
                         AND mm.lease_until IS NULL
                         AND mm.dequeue_at <= p_now
                       ORDER BY mm.dequeue_at, mm.id
                       LIMIT v_share
                         FOR UPDATE OF mm SKIP LOCKED) q
          ) m
         ORDER BY m.rank, p.ord
         LIMIT p_batch_size
      ) x;
    IF v_msg_ids IS NULL THEN
        RETURN;
    END IF;

    -- Lease them, count them on this backend's own rows (no other running transaction
    -- writes those, so the upsert never waits), and return them in batch order from the
    -- rows the update wrote.
    RETURN QUERY
        WITH leased AS (
            UPDATE lonnymq_message m
               SET lease_until = p_now + p_lease_ms,
                   lease_token = p_token,
                   leased_by = p_worker,
                   attempts = m.attempts + 1,
                   slot_taken = false
             WHERE m.id = ANY (v_msg_ids)
            RETURNING m.id, m.channel_id, m.payload, m.attempts, m.max_attempts, m.priority, m.dedup_key,
                      m.enqueued_at
        ), counted AS (
            INSERT INTO lonnymq_release_count AS r (channel_id, backend, released)
            SELECT l.channel_id, pg_catalog.pg_backend_pid(), pg_catalog.count(*)
              FROM leased l GROUP BY l.channel_id
            ON CONFLICT (channel_id, backend) DO UPDATE SET released = r.released + excluded.released
        )
        SELECT l.id, v_ch_names[v_msg_ords[o.pos]], l.payload, l.attempts, l.max_attempts, l.priority,
               l.dedup_key, l.enqueued_at, p_token, p_now + p_lease_ms
          FROM pg_catalog.unnest(v_msg_ids) WITH ORDINALITY AS o(id, pos)
          JOIN leased l ON l.id = o.id
         ORDER BY o.pos;
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
-- Acknowledge processed messages: delete them. Returns the ids acked; an id missing from the
-- result had a stale token (its lease expired and was taken over) or no longer exists.
CREATE OR REPLACE FUNCTION lonnymq_ack_v1(p_ids bigint[], p_tokens uuid[]) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_acked bigint[];
    v_slots bigint[];
    v_queue_slots bigint[];
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_list_v1('tokens', pg_catalog.array_ndims(p_tokens));
    IF coalesce(pg_catalog.cardinality(p_ids), 0) <> coalesce(pg_catalog.cardinality(p_tokens), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('tokens', 'must have one token per id', pg_catalog.cardinality(p_tokens)::text);
    END IF;
    WITH gone AS (
        DELETE FROM lonnymq_message m
         WHERE m.id = ANY (p_ids)
           AND (m.id, m.lease_token) IN (SELECT u.id, u.token FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_tokens)) AS u(id, token))
        RETURNING m.id, m.channel_id, m.slot_taken, m.queue_slot
    )
    SELECT coalesce(pg_catalog.array_agg(g.id), ARRAY[]::bigint[]), pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.slot_taken),
           pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.queue_slot)
      INTO v_acked, v_slots, v_queue_slots FROM gone g;
    IF v_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_slots_v1(v_slots);
    END IF;
    IF v_queue_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_queue_slots_v1(v_queue_slots);
    END IF;
    RETURN v_acked;
END
$$;
-- The three workflow functions a worker calls for every batch (this release, the step ack and
-- the inputs) plan without sequential scans: their statements reach steps by id, and a
-- generic plan made while the step table looked small (just emptied, vacuumed, autovacuum
-- not yet run) scanned all of it for each batch and kept doing so as it grew. Without JIT:
-- a plan that cannot avoid what a planner setting disables costs past jit_above_cost, and
-- compiling it took about 90 ms of every call.
--
-- Release steps (locked by the caller, ready: every parent succeeded) into the message table,
-- as an enqueue would: channels created in name order, each channel's shared advisory lock,
-- then one statement that marks the steps queued (their pending count 0) and inserts their
-- messages from the payloads they hold, then one wake-up mark per channel (which NOTIFYs the
-- queue's workers at commit). One update per step: the caller does not lower a released
-- step's count first. A step keeps its payload until it succeeds (its ack forgets it), so
-- the update returns it without reading each row a second time. Returns how many were
-- released.
CREATE OR REPLACE FUNCTION lonnymq_workflow_release_v2(p_ids bigint[], p_tolerance_ms bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_now      bigint := lonnymq_now_ms_v1();
    v_group    record;
    v_queues   text[] := ARRAY[]::text[];
    v_channels text[] := ARRAY[]::text[];
    v_ids      bigint[] := ARRAY[]::bigint[];
    v_delays   bigint[] := ARRAY[]::bigint[];
    v_n        integer := 0;
BEGIN
    IF p_ids IS NULL OR pg_catalog.cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    FOR v_group IN
        SELECT s.queue, s.channel, pg_catalog.min(s.delay_ms) AS delay_ms
          FROM lonnymq_workflow_step s
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting'
         GROUP BY s.queue, s.channel ORDER BY s.queue, s.channel
    LOOP
        v_queues := v_queues OPERATOR(pg_catalog.||) v_group.queue;
        v_channels := v_channels OPERATOR(pg_catalog.||) v_group.channel;
        v_ids := v_ids OPERATOR(pg_catalog.||) lonnymq_channel_id_v1(v_group.queue, v_group.channel);
        v_delays := v_delays OPERATOR(pg_catalog.||) v_group.delay_ms;
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(),
                                                       lonnymq_lock_key_v1(v_ids[pg_catalog.cardinality(v_ids)]));
    END LOOP;
    IF pg_catalog.cardinality(v_ids) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM lonnymq_hold_channels_v1(v_ids);
    WITH released AS (
        UPDATE lonnymq_workflow_step s
           SET state = 'queued', pending = 0, releases = s.releases + 1, released_at = pg_catalog.now()
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting'
        RETURNING s.id, s.queue, s.channel, s.payload, s.delay_ms, s.max_attempts, s.workflow_id
    ), inserted AS (
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
        SELECT r.id, c.id, r.payload, v_now + r.delay_ms, 0, r.max_attempts,
               'lonnymq.step:' OPERATOR(pg_catalog.||) r.workflow_id::text
          FROM released r
          JOIN ROWS FROM (pg_catalog.unnest(v_queues), pg_catalog.unnest(v_channels), pg_catalog.unnest(v_ids))
               AS c(queue, channel, id) ON c.queue = r.queue AND c.channel = r.channel
         ORDER BY r.id
        RETURNING 1
    )
    SELECT pg_catalog.count(*)::integer INTO v_n FROM inserted;
    FOR i IN 1 .. pg_catalog.cardinality(v_ids) LOOP
        PERFORM lonnymq_mark_v1(v_queues[i], v_ids[i], v_now + v_delays[i], p_tolerance_ms);
    END LOOP;
    RETURN v_n;
END
$$;
-- Ack steps (the worker's ack for messages whose dedup key says they are steps): the ack of
-- lonnymq_ack_v1, and in the same transaction each step acked now succeeds with its output,
-- its children count it, and every child whose parents have all succeeded is released
-- (unless its workflow was cancelled). A step whose lease is stale acks nothing, so a step
-- run twice counts once. Rows are locked in one order: messages (the ack), then steps (the
-- ones acked now, which no other ack can hold: each one's message was deleted by this ack;
-- then their waiting children by id), then workflows by id. Every statement reaches its
-- rows through an index (the ids given, the children's ids the acked steps' rows return),
-- whatever the size of the tables; a child is updated once, by the ack that lowers its
-- count or releases it, and a child shared by acks from other workers (a fan-in) is locked
-- only after this ack's own steps are written. The children are locked and counted in one
-- statement: a child another ack updated while this one waited for its lock is read as that
-- ack left it (READ COMMITTED's recheck of a locked row). No nested loops: every join here
-- is between id arrays and the rows they name, whose sizes a generic plan cannot know.
-- Returns the ids acked.
CREATE OR REPLACE FUNCTION lonnymq_workflow_ack_v2(p_ids bigint[], p_tokens uuid[], p_outputs jsonb[], p_tolerance_ms bigint)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_nestloop = off
SET jit = off
AS $$
DECLARE
    v_acked   bigint[];
    v_flows   bigint[];
    v_nflows  integer;
    v_kids    bigint[];
    v_ready   bigint[];
    v_lower   bigint[];
    v_lower_n integer[];
    v_cancelled bigint[];
BEGIN
    IF coalesce(pg_catalog.cardinality(p_outputs), 0) <> coalesce(pg_catalog.cardinality(p_ids), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('outputs', 'must have one output per id', pg_catalog.cardinality(p_outputs)::text);
    END IF;
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    v_acked := lonnymq_ack_v1(p_ids, p_tokens);
    IF pg_catalog.cardinality(v_acked) = 0 THEN
        RETURN v_acked;
    END IF;
    -- The steps done now (their payload forgotten), their workflows, and their children (a
    -- child once per parent done).
    WITH done AS (
        UPDATE lonnymq_workflow_step s
           SET state = 'succeeded', output = p_outputs[pg_catalog.array_position(p_ids, s.id)], payload = NULL,
               finished_at = pg_catalog.now()
         WHERE s.id = ANY (v_acked) AND s.state = 'queued'
        RETURNING s.workflow_id, s.children
    )
    SELECT pg_catalog.array_agg(d.workflow_id), pg_catalog.count(DISTINCT d.workflow_id)::integer,
           (SELECT pg_catalog.array_agg(k.id ORDER BY k.id)
              FROM done x CROSS JOIN LATERAL pg_catalog.unnest(x.children) AS k(id))
      INTO v_flows, v_nflows, v_kids FROM done d;
    IF v_flows IS NULL THEN
        RETURN v_acked;
    END IF;
    IF v_kids IS NOT NULL THEN
        -- The cancelled workflows among these (a child is in its parent's workflow): their
        -- children are counted, never released. A cancel that commits after this read has
        -- marked its waiting steps cancelled, which the locking read below rechecks.
        SELECT pg_catalog.array_agg(w.id) INTO v_cancelled
          FROM lonnymq_workflow w WHERE w.id = ANY (v_flows) AND w.state = 'cancelled';
        -- The waiting children, locked in id order: those whose last parents are done now
        -- (released in one update each) and the others (their count lowered). Reached by
        -- their ids ("= ANY") and matched to their counts by a hash or merge join: a generic
        -- plan made while the tables looked small joined them in a nested loop, which read
        -- the children once per child (a 1,000-child release took 20 to 60 ms).
        SELECT pg_catalog.array_agg(x.id ORDER BY x.id) FILTER (WHERE x.ready),
               pg_catalog.array_agg(x.id ORDER BY x.id) FILTER (WHERE NOT x.ready),
               pg_catalog.array_agg(x.n ORDER BY x.id) FILTER (WHERE NOT x.ready)
          INTO v_ready, v_lower, v_lower_n
          FROM (SELECT s.id, c.n,
                       s.pending = c.n AND (v_cancelled IS NULL OR s.workflow_id <> ALL (v_cancelled)) AS ready
                  FROM lonnymq_workflow_step s
                  JOIN (SELECT k.id, pg_catalog.count(*)::integer AS n
                          FROM pg_catalog.unnest(v_kids) AS k(id) GROUP BY k.id) c ON c.id = s.id
                 WHERE s.id = ANY (v_kids) AND s.state = 'waiting'
                 ORDER BY s.id FOR UPDATE OF s) x;
        IF v_lower IS NOT NULL THEN
            UPDATE lonnymq_workflow_step s SET pending = s.pending - u.n
              FROM ROWS FROM (pg_catalog.unnest(v_lower), pg_catalog.unnest(v_lower_n)) AS u(id, n)
             WHERE s.id = ANY (v_lower) AND s.id = u.id;
        END IF;
        IF v_ready IS NOT NULL THEN
            PERFORM lonnymq_workflow_release_v2(v_ready, p_tolerance_ms);
        END IF;
    END IF;
    IF v_nflows > 1 THEN
        PERFORM 1 FROM lonnymq_workflow w WHERE w.id = ANY (v_flows) ORDER BY w.id FOR NO KEY UPDATE;
    END IF;
    UPDATE lonnymq_workflow w
       SET remaining = w.remaining - d.n,
           state = CASE WHEN w.state = 'running' AND w.remaining = d.n THEN 'succeeded' ELSE w.state END,
           finished_at = CASE WHEN w.state = 'running' AND w.remaining = d.n THEN pg_catalog.now() ELSE w.finished_at END
      FROM (SELECT f.workflow_id, pg_catalog.count(*)::integer AS n
              FROM pg_catalog.unnest(v_flows) AS f(workflow_id) GROUP BY f.workflow_id) d
     WHERE w.id = ANY (v_flows) AND w.id = d.workflow_id;
    RETURN v_acked;
END
$$;
-- What a worker gives a dequeued step's handler: its name, and its parents' outputs by name.
-- VOLATILE, so that called after a dequeue in the same statement it reads with a snapshot of
-- its own, taken after the dequeue's: it sees the ack that released the step (and wrote its
-- last parent's output) even when that ack committed while the statement ran.
CREATE OR REPLACE FUNCTION lonnymq_workflow_inputs_v1(p_ids bigint[])
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
