-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0015: a busy channel is served by several dequeuers at once.
-- - lonnymq_dequeue_v1 (same name, arguments and result): a call that finds no due channel
--   it can lock, because other dequeuers hold them, leases the next ready messages of the
--   due channels without limits (no cap, interval, token bucket or pause) through SKIP
--   LOCKED on the message rows alone (lonnymq_dequeue_held_v1), instead of coming back
--   empty; so does a call whose channel pick gave up after the 20 ms lock timeout.
-- - Those releases are counted in lonnymq_release_count (one row per channel and server
--   backend); lonnymq_queue_stats_v1/_v2 add them to released_total, lonnymq_reap_v1 folds
--   the rows of backends that are gone into the channel rows, lonnymq_delete_channel_v1
--   drops a deleted channel's rows.
-- - lonnymq_configure_channel_v3 waits for such leases of its channel in flight (advisory
--   lock namespace lonnymq_lease_lock_ns_v1), so a new limit counts them and holds at once.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- Releases counted away from the channel row: a dequeue that leases messages of a channel
-- another dequeuer holds (lonnymq_dequeue_held_v1) cannot add them to the row's
-- released_total without waiting for that dequeuer. It adds them here instead, to its own
-- row (one per channel and server backend, so no two running transactions write the same
-- row); the reaper folds the rows of backends that are gone into released_total. A channel's
-- count is released_total plus its rows here.
CREATE TABLE lonnymq_release_count (
    channel_id  bigint  NOT NULL,
    backend     integer NOT NULL,
    released    bigint  NOT NULL,
    PRIMARY KEY (channel_id, backend)
) WITH (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- A second namespace, for leases taken without the channel row (lonnymq_dequeue_held_v1):
-- such a dequeue holds it shared; a change of the channel's limits waits for it exclusively.
CREATE FUNCTION lonnymq_lease_lock_ns_v1() RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 1280135474 $$;

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
CREATE FUNCTION lonnymq_dequeue_held_v1(
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
AS $$
DECLARE
    v_seen    bigint[];
    v_ch_ids  bigint[];
    v_msg_ids bigint[];
    v_share   integer;
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
                    (SELECT c.id, w.dequeue_at AS at, c.turn FROM lonnymq_wake w
                       JOIN lonnymq_channel c ON c.id = w.channel_id
                      WHERE w.queue = p_queue
                        AND w.dequeue_at <= p_now
                        AND NOT c.paused
                        AND c.max_concurrency IS NULL
                        AND c.release_interval_ms = 0
                        AND c.rate_count IS NULL
                      ORDER BY w.dequeue_at
                      LIMIT p_batch_size)) x
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
    SELECT pg_catalog.array_agg(u.id ORDER BY u.ord) INTO v_ch_ids
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

    SELECT pg_catalog.array_agg(x.id ORDER BY x.rank, x.ord) INTO v_msg_ids
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

    -- Lease them, and count them on this backend's own rows (no other running transaction
    -- writes those, so the upsert never waits).
    WITH leased AS (
        UPDATE lonnymq_message m
           SET lease_until = p_now + p_lease_ms,
               lease_token = p_token,
               leased_by = p_worker,
               attempts = m.attempts + 1,
               slot_taken = false
         WHERE m.id = ANY (v_msg_ids)
        RETURNING m.channel_id
    )
    INSERT INTO lonnymq_release_count AS r (channel_id, backend, released)
    SELECT l.channel_id, pg_catalog.pg_backend_pid(), pg_catalog.count(*)
      FROM leased l GROUP BY l.channel_id
    ON CONFLICT (channel_id, backend) DO UPDATE SET released = r.released + excluded.released;

    RETURN QUERY
        SELECT m.id, ch.name, m.payload, m.attempts, m.max_attempts, m.priority, m.dedup_key,
               m.enqueued_at, m.lease_token, m.lease_until
          FROM pg_catalog.unnest(v_msg_ids) WITH ORDINALITY AS o(id, pos)
          JOIN lonnymq_message m ON m.id = o.id
          JOIN lonnymq_channel ch ON ch.id = m.channel_id
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
-- (lonnymq_dequeue_held_v1).
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
    --    other until deadlock_timeout (1 s) kills one. A short lock timeout ends that wait
    --    after 20 ms; the call then serves the held channels, as when it finds none free.
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
        v_ch_ids := NULL;
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
    v_n := coalesce(pg_catalog.cardinality(v_ch_ids), 0);
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

-- Recover messages whose lease expired (their worker died or stalled): they become ready
-- again at their old position, or dead when their attempts are used up, and their
-- concurrency slots come back. Bounded per call, never waits on a lock. Also prunes dedup
-- keys older than p_dedup_window_ms. Returns the number of messages recovered.
CREATE OR REPLACE FUNCTION lonnymq_reap_v1(
    p_limit            integer DEFAULT 500,
    p_dedup_window_ms  bigint  DEFAULT 86400000,
    p_tolerance_ms     bigint  DEFAULT 50
) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now      bigint := lonnymq_now_ms_v1();
    v_channels bigint[];
    v_dead     bigint[];
    v_back     bigint[];
    v_back_at  bigint[];
    v_counts   bigint[];
BEGIN
    PERFORM lonnymq_check_range_v1('limit', p_limit::bigint, 1::bigint, 100000::bigint, false);
    PERFORM lonnymq_check_range_v1('dedup_window', p_dedup_window_ms, 0::bigint, 31622400000::bigint, true);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    -- Expired leases of channels we can lock now without waiting.
    WITH expired AS (
        SELECT m.id, m.channel_id, m.attempts, m.max_attempts, m.dequeue_at
          FROM lonnymq_message m
         WHERE m.lease_until < v_now
         ORDER BY m.lease_until
         LIMIT p_limit
           FOR UPDATE OF m SKIP LOCKED
    ), lockable AS (
        SELECT c.id FROM lonnymq_channel c
         WHERE c.id IN (SELECT e.channel_id FROM expired e)
         ORDER BY c.id
           FOR NO KEY UPDATE OF c SKIP LOCKED
    )
    SELECT pg_catalog.array_agg(e.id ORDER BY e.id) FILTER (WHERE e.attempts >= e.max_attempts),
           pg_catalog.array_agg(e.id ORDER BY e.id) FILTER (WHERE e.attempts < e.max_attempts),
           pg_catalog.array_agg(e.dequeue_at ORDER BY e.id) FILTER (WHERE e.attempts < e.max_attempts)
      INTO v_dead, v_back, v_back_at
      FROM expired e
     WHERE e.channel_id IN (SELECT l.id FROM lockable l WHERE
               pg_catalog.pg_try_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(l.id)));

    IF v_dead IS NOT NULL THEN
        PERFORM lonnymq_bury_v1(v_dead, 'lease_expired', 'lease expired with no attempts left');
    END IF;
    IF v_back IS NOT NULL THEN
        PERFORM lonnymq_unlease_v1(v_back, v_back_at, 'lease expired', false, p_tolerance_ms);
    END IF;

    -- Releases counted away from the channel rows by backends that are gone: into their
    -- channels' released_total (rows and channels this call can lock without waiting).
    WITH gone AS (
        DELETE FROM lonnymq_release_count r
         WHERE (r.channel_id, r.backend) IN (
             SELECT rr.channel_id, rr.backend FROM lonnymq_release_count rr
               JOIN lonnymq_channel c ON c.id = rr.channel_id
              WHERE rr.backend NOT IN (SELECT a.pid FROM pg_catalog.pg_stat_activity a WHERE a.pid IS NOT NULL)
              LIMIT p_limit
                FOR UPDATE OF rr SKIP LOCKED
                FOR NO KEY UPDATE OF c SKIP LOCKED)
        RETURNING r.channel_id, r.released
    )
    SELECT pg_catalog.array_agg(g.channel_id ORDER BY g.channel_id), pg_catalog.array_agg(g.n ORDER BY g.channel_id)
      INTO v_channels, v_counts
      FROM (SELECT gone.channel_id, pg_catalog.sum(gone.released)::bigint AS n FROM gone GROUP BY gone.channel_id) g;
    IF v_channels IS NOT NULL THEN
        UPDATE lonnymq_channel c SET released_total = c.released_total + u.n
          FROM ROWS FROM (pg_catalog.unnest(v_channels), pg_catalog.unnest(v_counts)) AS u(id, n)
         WHERE c.id = u.id AND c.id = ANY (v_channels);
    END IF;

    IF p_dedup_window_ms IS NOT NULL THEN
        DELETE FROM lonnymq_dedup d
         WHERE (d.channel_id, d.dedup_key) IN (
             SELECT dd.channel_id, dd.dedup_key FROM lonnymq_dedup dd
              WHERE dd.created_at < pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => p_dedup_window_ms::double precision / 1000::double precision)
              LIMIT p_limit * 20 FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN coalesce(pg_catalog.cardinality(v_dead), 0) + coalesce(pg_catalog.cardinality(v_back), 0);
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
CREATE OR REPLACE FUNCTION lonnymq_configure_channel_v3(
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
    -- Dequeues that lease this channel's messages without its row (lonnymq_dequeue_held_v1)
    -- hold this lock shared and read the limits after taking it: wait for those running, so
    -- the leases counted below include theirs and later ones see the new limits.
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_lease_lock_ns_v1(), lonnymq_lock_key_v1(v_id));
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

-- Delete a channel only while it holds no message and no enqueue into it is in flight.
-- Returns 'deleted', 'not_empty', 'busy' (a producer or dequeuer holds it: try again) or
-- 'missing'. Dead messages keep their queue and channel names (requeue recreates the
-- channel). The foreign-key check of the delete scans lonnymq_message (no index leads with
-- channel_id for every row); deleting a channel is rare, so the schema does not pay for one.
CREATE OR REPLACE FUNCTION lonnymq_delete_channel_v1(p_id bigint) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM 1 FROM lonnymq_channel c WHERE c.id = p_id;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    SELECT c.id INTO v_id FROM lonnymq_channel c WHERE c.id = p_id FOR UPDATE SKIP LOCKED;
    IF v_id IS NULL
       OR NOT pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(p_id)) THEN
        RETURN 'busy';
    END IF;
    IF EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.channel_id = p_id AND m.lease_until IS NULL)
       OR EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.lease_until IS NOT NULL AND m.channel_id = p_id) THEN
        RETURN 'not_empty';
    END IF;
    -- Its wake-up marks too: dequeues apply marks through the channel row, so a deleted
    -- channel's marks would otherwise stay forever.
    DELETE FROM lonnymq_wake w WHERE w.channel_id = p_id;
    DELETE FROM lonnymq_release_count r WHERE r.channel_id = p_id;
    DELETE FROM lonnymq_channel c WHERE c.id = p_id;
    RETURN 'deleted';
END
$$;

-- Kept for code of a release before paused became a state of its own (a rolling deploy): a
-- paused channel's messages count as ready or scheduled, paused is 0. Use _v2.
-- Exact figures per queue (all queues when p_queues is NULL), as sample rows with id NULL.
-- Cost: ready/scheduled walk the ready index (channel_id, dequeue_at, id) once per channel,
-- i.e. one index entry per waiting message of the queue (index-only when the visibility
-- map allows); in_flight walks the lease index (messages in flight only); dead walks the
-- (queue, died_at) index. No scan of the message table's heap by channel. released_total
-- is the sum of the channel rows' counters and of lonnymq_release_count (a small table).
CREATE OR REPLACE FUNCTION lonnymq_queue_stats_v1(p_queues text[] DEFAULT NULL)
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

-- Exact figures per queue (all queues when p_queues is NULL), as sample rows with id NULL.
-- A paused channel's waiting messages count as paused only: never ready, never scheduled,
-- and never the oldest ready (an operator who pauses a tenant is not alerted by its wait).
-- Cost as _v1: one walk of each channel's ready-index range, the lease index, and the
-- (queue, died_at) index.
CREATE OR REPLACE FUNCTION lonnymq_queue_stats_v2(p_queues text[] DEFAULT NULL)
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
    ), queues AS (
        SELECT waiting.queue FROM waiting UNION SELECT dead.queue FROM dead
    )
    SELECT NULL::bigint, q.queue, pg_catalog.clock_timestamp(),
           coalesce(w.channels, 0), coalesce(w.paused_channels, 0),
           coalesce(w.ready, 0)::bigint, coalesce(w.scheduled, 0)::bigint,
           coalesce(f.n, 0), coalesce(d.n, 0),
           CASE WHEN w.head <= now_ms.v THEN now_ms.v - w.head END,
           coalesce(w.released_total, 0)::bigint, coalesce(w.paused, 0)::bigint
      FROM queues q CROSS JOIN now_ms
      LEFT JOIN waiting w ON w.queue = q.queue
      LEFT JOIN flying f ON f.queue = q.queue
      LEFT JOIN dead d ON d.queue = q.queue
     ORDER BY q.queue
$$;
