-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0062: the time until which a session's candidate scans start after the last
-- message taken from each channel (0058, under a held snapshot) is shared by the queue's
-- sessions (lonnymq_ready_mark), as 0061 shares the eligible mark: a session due for a scan
-- from the front takes the time another wrote after its scan while that is ahead, else the
-- one that gets the queue's advisory lock (lonnymq_ready_lock_ns_v1) scans and writes.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

CREATE TABLE lonnymq_ready_mark (
    queue  text   PRIMARY KEY,
    until  bigint NOT NULL
);

CREATE FUNCTION lonnymq_ready_lock_ns_v1() RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 1280135478 $$;
CREATE FUNCTION lonnymq_ready_after_v1(p_queue text, p_now bigint, p_state text) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_until bigint;
BEGIN
    IF p_state = '' THEN
        RETURN false;
    ELSIF p_now < p_state::bigint THEN
        RETURN true;
    END IF;
    SELECT rm.until INTO v_until FROM lonnymq_ready_mark rm WHERE rm.queue = p_queue;
    IF v_until > p_now THEN
        PERFORM pg_catalog.set_config('lonnymq.ready_from_' || pg_catalog.md5(p_queue), v_until::text, false);
        RETURN true;
    END IF;
    RETURN NOT pg_catalog.pg_try_advisory_xact_lock(lonnymq_ready_lock_ns_v1(), pg_catalog.hashtext(p_queue));
END
$$;
CREATE OR REPLACE FUNCTION lonnymq_ready_from_v1(p_queue text, p_now bigint, p_read bigint, p_taken integer) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_name  text := 'lonnymq.ready_from_' || pg_catalog.md5(p_queue);
    v_was   text := coalesce(pg_catalog.current_setting(v_name, true), '');
    v_until bigint := CASE WHEN p_read > 1000 + 2 * p_taken::bigint THEN p_now + least(p_read / 10, 1000) END;
BEGIN
    PERFORM pg_catalog.set_config(v_name, coalesce(v_until::text, ''), false);
    IF (v_until IS NOT NULL OR v_was <> '')
       AND pg_catalog.pg_try_advisory_xact_lock(lonnymq_ready_lock_ns_v1(), pg_catalog.hashtext(p_queue)) THEN
        IF v_until IS NOT NULL THEN
            INSERT INTO lonnymq_ready_mark AS rm (queue, until) VALUES (p_queue, v_until)
                ON CONFLICT (queue) DO UPDATE SET until = excluded.until;
        ELSE
            DELETE FROM lonnymq_ready_mark rm WHERE rm.queue = p_queue;
        END IF;
    END IF;
END
$$;
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
    v_state    text;
    v_after    boolean;
    v_after_at bigint[];
    v_after_id bigint[];
    v_read     bigint;
    v_mark_state text;
    v_from     bigint;
BEGIN
    -- Where the scan of the eligible index starts: at the mark of this session's calls of
    -- lonnymq_dequeue_v1 while it holds (the entries in front of it are the versions a held
    -- snapshot keeps), else at the front.
    v_mark_state := coalesce(pg_catalog.current_setting('lonnymq.eligible_from_' || pg_catalog.md5(p_queue), true), '');
    IF v_mark_state <> '' AND p_now < pg_catalog.split_part(v_mark_state, ' ', 1)::bigint THEN
        v_from := pg_catalog.split_part(v_mark_state, ' ', 2)::bigint;
    END IF;
    -- Due channels without limits, in round-robin order, read without a lock: due by their
    -- turn, or by a committed wake-up mark that another dequeuer is applying right now.
    SELECT pg_catalog.array_agg(d.id ORDER BY d.at, d.turn) INTO v_seen
      FROM (SELECT DISTINCT ON (x.id) x.id, x.at, x.turn
              FROM ((SELECT c.id, c.next_dequeue_at AS at, c.turn FROM lonnymq_channel c
                      WHERE c.queue = p_queue
                        AND c.next_dequeue_at <= p_now
                        AND c.next_dequeue_at >= coalesce(v_from, -9223372036854775808)
                        AND c.next_dequeue_at IS NOT NULL
                        AND NOT c.paused
                        AND (c.max_concurrency IS NULL OR c.in_flight + least(c.head_slots, c.max_concurrency) <= c.max_concurrency)
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
    -- Where the candidate scans start: as lonnymq_dequeue_v1's, after the last message a
    -- dequeue took from the channel while this session's scans from the front read many
    -- more entries than they took (the state lonnymq_ready_from_v1 keeps, after a scan from
    -- the front here or there).
    v_state := coalesce(pg_catalog.current_setting('lonnymq.ready_from_' || pg_catalog.md5(p_queue), true), '');
    v_after := v_state <> '' AND (p_now < v_state::bigint OR lonnymq_ready_after_v1(p_queue, p_now, v_state));
    SELECT pg_catalog.array_agg(u.id ORDER BY u.ord), pg_catalog.array_agg(c.name ORDER BY u.ord),
           pg_catalog.array_agg(CASE WHEN v_after THEN c.taken_at END ORDER BY u.ord),
           pg_catalog.array_agg(CASE WHEN v_after THEN c.taken_id END ORDER BY u.ord)
      INTO v_ch_ids, v_ch_names, v_after_at, v_after_id
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
    v_read := pg_catalog.pg_stat_get_xact_tuples_returned('lonnymq_message_ready_idx'::regclass);

    SELECT pg_catalog.array_agg(x.id ORDER BY x.rank, x.ord), pg_catalog.array_agg(x.ord ORDER BY x.rank, x.ord)
      INTO v_msg_ids, v_msg_ords
      FROM (
        SELECT m.id, m.rank, p.ord
          FROM ROWS FROM (pg_catalog.unnest(v_ch_ids), pg_catalog.unnest(v_after_at), pg_catalog.unnest(v_after_id))
               WITH ORDINALITY AS p(channel_id, after_at, after_id, ord)
          CROSS JOIN LATERAL (
              SELECT q.id, pg_catalog.row_number() OVER (ORDER BY q.dequeue_at, q.id) AS rank
                FROM (SELECT mm.id, mm.dequeue_at
                        FROM lonnymq_message mm
                       WHERE mm.channel_id = p.channel_id
                         AND mm.lease_until IS NULL
                         AND mm.dequeue_at <= p_now
                         AND (mm.dequeue_at, mm.id) > (coalesce(p.after_at, -1), coalesce(p.after_id, -1))
                       ORDER BY mm.dequeue_at, mm.id
                       LIMIT v_share
                         FOR UPDATE OF mm SKIP LOCKED) q
          ) m
         ORDER BY m.rank, p.ord
         LIMIT p_batch_size
      ) x;
    IF NOT v_after THEN
        -- A scan from the front: what it read decides where the next ones start.
        v_read := pg_catalog.pg_stat_get_xact_tuples_returned('lonnymq_message_ready_idx'::regclass) - v_read;
        IF v_read > 1000 OR v_state <> '' THEN
            PERFORM lonnymq_ready_from_v1(p_queue, p_now, v_read, coalesce(pg_catalog.cardinality(v_msg_ids), 0));
        END IF;
    END IF;
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
    v_msg_dqs     bigint[];
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
    v_caps        integer[];
    v_slot_rooms  integer[];
    v_msg_slots   integer[];
    v_next_slots  integer[];
    v_head_slots  integer[];
    v_q_keep      integer;
    v_q_slot_need integer := 1;
    v_many_slots  boolean;
    v_ch_tids     tid[];
    v_next_tids   tid[];
    v_mark_name   text;
    v_mark_state  text;
    v_mark        bigint;
    v_front_at    bigint;
    v_from        bigint;
    v_read        bigint;
    v_first_at    bigint;
    v_ready_name  text;
    v_ready_state text;
    v_after       boolean;
    v_after_at    bigint[];
    v_after_id    bigint[];
    v_taken_at    bigint[];
    v_taken_id    bigint[];
    v_ready_read  bigint;
    v_shared_at   bigint;
    v_shared_mark bigint;
    v_publish     boolean := false;
    v_unpublish   boolean := false;
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
    -- Where step 1 starts (docs/performance.md, "A held snapshot"). It scans the eligible
    -- index from the front of the queue's range, and while a snapshot holds the horizon back
    -- that front fills with the entries of every channel version written since (each visit
    -- moves the channel's key), which no VACUUM can remove. When this session's last scan
    -- from the front read many more entries than it picked, its next calls start at the
    -- earliest turn that scan picked (the mark), and scan from the front again after a while
    -- (1 ms per 100 entries it read, at most a second) or when the mark finds no channel. A
    -- channel whose turn lies before the mark (a priority's wake-up, a cap's slot given back)
    -- waits for that scan meanwhile; with a clean index every call scans from the front.
    -- A session whose mark is due for that scan shares it with the queue's other sessions
    -- (lonnymq_eligible_mark): it takes the mark another one wrote after its own scan from the
    -- front, while that holds; else the one session that gets the queue's advisory lock scans
    -- and writes what it found, and the others start at their own marks meanwhile. So the
    -- queue's sessions scan from the front about once a second between them, not each.
    v_mark_name := 'lonnymq.eligible_from_' || pg_catalog.md5(p_queue);
    v_mark_state := pg_catalog.current_setting(v_mark_name, true);
    IF v_mark_state IS NOT NULL AND v_mark_state <> '' THEN
        v_front_at := pg_catalog.split_part(v_mark_state, ' ', 1)::bigint;
        v_mark := pg_catalog.split_part(v_mark_state, ' ', 2)::bigint;
        IF v_now >= v_front_at THEN
            SELECT em.front_at, em.mark INTO v_shared_at, v_shared_mark
              FROM lonnymq_eligible_mark em WHERE em.queue = p_queue;
            IF v_shared_at > v_now THEN
                v_front_at := v_shared_at;
                v_mark := greatest(v_mark, v_shared_mark);
            ELSIF NOT pg_catalog.pg_try_advisory_xact_lock(lonnymq_mark_lock_ns_v1(), pg_catalog.hashtext(p_queue)) THEN
                -- Another session scans from the front now: this call starts at the mark.
                v_front_at := v_now + 1;
            END IF;
        END IF;
    END IF;
    v_from := CASE WHEN v_now < v_front_at THEN v_mark END;
    -- The same for the ready index, where each channel's range starts with an entry for every
    -- message taken since the snapshot: when this session's last candidate scan from the
    -- front read many more entries than it took, its candidate scans start after the last
    -- message a dequeue took from each channel (taken_at, taken_id), until the time the state
    -- names (lonnymq_ready_from_v1). A message put behind that point meanwhile (a priority, a
    -- lease given back) waits for the next scan from the front, or for the look from the front
    -- of step 4 when the channel has nothing after it; an ordered channel's are always read
    -- from the front (its retried head keeps its place).
    v_ready_name := 'lonnymq.ready_from_' || pg_catalog.md5(p_queue);
    v_ready_state := coalesce(pg_catalog.current_setting(v_ready_name, true), '');
    v_after := v_ready_state <> ''
               AND (v_now < v_ready_state::bigint OR lonnymq_ready_after_v1(p_queue, v_now, v_ready_state));

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
        LOOP
            v_read := pg_catalog.pg_stat_get_xact_tuples_returned('lonnymq_channel_eligible_idx'::regclass);
            SELECT pg_catalog.array_agg(p.id), pg_catalog.array_agg(p.ctid), pg_catalog.min(p.next_dequeue_at),
                   pg_catalog.array_agg(p.name),
                   pg_catalog.array_agg(CASE WHEN p.level IS NULL THEN p.room
                                             ELSE least(p.room::bigint, p.level / p.rate_period_ms)::integer END),
                   pg_catalog.array_agg(p.id) FILTER (WHERE p.max_concurrency IS NOT NULL),
                   pg_catalog.array_agg(p.weight),
                   pg_catalog.array_agg(p.round_used),
                   pg_catalog.array_agg(p.level),
                   pg_catalog.array_agg(p.rate_burst),
                   pg_catalog.array_agg(p.level / p.rate_period_ms), pg_catalog.bool_or(p.level IS NOT NULL),
                   pg_catalog.sum(p.weight - p.round_used), pg_catalog.sum(p.weight),
                   pg_catalog.array_agg(p.max_concurrency), pg_catalog.array_agg(p.max_concurrency - p.in_flight),
                   pg_catalog.array_agg(p.after_at), pg_catalog.array_agg(p.after_id)
              INTO v_ch_ids, v_ch_tids, v_first_at, v_ch_names, v_quotas, v_limited, v_weights, v_used, v_levels,
                   v_bursts, v_tokens, v_buckets, v_rounds_first, v_weight_sum, v_caps, v_slot_rooms,
                   v_after_at, v_after_id
              FROM (
                SELECT c.id, c.ctid, c.name, c.next_dequeue_at, c.turn, c.max_concurrency, c.in_flight, c.weight, c.round_used,
                       c.rate_period_ms, c.rate_burst,
                       CASE WHEN v_after AND NOT c.ordered THEN c.taken_at END AS after_at,
                       CASE WHEN v_after AND NOT c.ordered THEN c.taken_id END AS after_id,
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
                   AND c.next_dequeue_at >= coalesce(v_from, -9223372036854775808)
                   AND c.next_dequeue_at IS NOT NULL
                   AND NOT c.paused
                   AND (c.max_concurrency IS NULL OR c.in_flight + least(c.head_slots, c.max_concurrency) <= c.max_concurrency)
                   -- A bucket refills from its last release: never from a release "after" now
                   -- (another dequeuer's clock read a moment later).
                   AND (c.rate_count IS NULL OR c.last_dequeue_at IS NULL OR c.last_dequeue_at <= v_now)
                 ORDER BY c.next_dequeue_at, c.turn
                 LIMIT v_batch
                   FOR NO KEY UPDATE OF c SKIP LOCKED
              ) p;
            EXIT WHEN v_from IS NULL OR v_ch_ids IS NOT NULL;
            v_from := NULL;  -- nothing from the mark on: from the front
        END LOOP;
        IF v_from IS NULL THEN
            -- A scan from the front: what it read decides where the next calls start. One that
            -- found no channel it could lock (the others' dequeuers hold them) keeps the mark
            -- it had: it read no turn past which to move it, and the entries in front are there.
            v_read := pg_catalog.pg_stat_get_xact_tuples_returned('lonnymq_channel_eligible_idx'::regclass) - v_read;
            IF v_ch_ids IS NOT NULL AND v_read > 5000 + 10 * pg_catalog.cardinality(v_ch_ids) THEN
                v_front_at := v_now + least(v_read / 100, 1000);
                v_mark := v_first_at;
                PERFORM pg_catalog.set_config(v_mark_name, v_front_at || ' ' || v_mark, false);
                v_publish := true;
            ELSIF v_ch_ids IS NULL AND v_mark IS NOT NULL AND v_read > 5000 THEN
                PERFORM pg_catalog.set_config(v_mark_name, (v_now + least(v_read / 100, 1000)) || ' ' || v_mark, false);
            ELSIF v_mark_state IS NOT NULL AND v_mark_state <> '' THEN
                PERFORM pg_catalog.set_config(v_mark_name, '', false);
                v_unpublish := v_shared_at IS NOT NULL;
            END IF;
        ELSE
            PERFORM pg_catalog.set_config(v_mark_name, v_front_at || ' ' || v_first_at, false);
        END IF;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        v_ch_ids := NULL;
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
    -- What a scan from the front found, for the queue's other sessions: written by the one
    -- that holds the queue's advisory lock (so no writer waits for another), at most once
    -- per such scan; the row goes when a scan from the front reads few entries again.
    IF (v_publish OR v_unpublish)
       AND pg_catalog.pg_try_advisory_xact_lock(lonnymq_mark_lock_ns_v1(), pg_catalog.hashtext(p_queue)) THEN
        IF v_publish THEN
            INSERT INTO lonnymq_eligible_mark AS em (queue, front_at, mark) VALUES (p_queue, v_front_at, v_mark)
                ON CONFLICT (queue) DO UPDATE SET front_at = excluded.front_at, mark = excluded.mark;
        ELSE
            DELETE FROM lonnymq_eligible_mark em WHERE em.queue = p_queue;
        END IF;
    END IF;
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
    --    A capped channel takes messages in order while their slots fit its free ones (each
    --    counted at most its cap, so a message that asks more than a smaller cap runs once
    --    the cap is free); a message that asks fewer never passes one that asks more. The plain
    --    query reads each candidate's slots and the cut by slots follows it, only when one
    --    asks more than one slot.
    IF NOT v_after THEN
        v_ready_read := pg_catalog.pg_stat_get_xact_tuples_returned('lonnymq_message_ready_idx'::regclass);
    END IF;
    IF v_buckets OR v_qc.rate_count IS NOT NULL THEN
        SELECT pg_catalog.array_agg(x.id), pg_catalog.array_agg(x.ord), pg_catalog.array_agg(x.rnd),
               pg_catalog.array_agg(x.cost), pg_catalog.array_agg(x.slots), pg_catalog.array_agg(x.dequeue_at)
          INTO v_msg_ids, v_msg_ords, v_msg_rounds, v_msg_costs, v_msg_slots, v_msg_dqs
          FROM (
            SELECT m.id, m.rank, p.ord, (p.used + m.rank - 1) / p.weight AS rnd, m.cost, m.slots, m.dequeue_at
              FROM ROWS FROM (pg_catalog.unnest(v_ch_ids), pg_catalog.unnest(v_quotas),
                              pg_catalog.unnest(v_weights), pg_catalog.unnest(v_used),
                              pg_catalog.unnest(v_tokens), pg_catalog.unnest(v_bursts),
                              pg_catalog.unnest(v_caps), pg_catalog.unnest(v_slot_rooms),
                              pg_catalog.unnest(v_after_at), pg_catalog.unnest(v_after_id))
                   WITH ORDINALITY AS p(channel_id, room, weight, used, tokens, burst, cap, slot_room, after_at,
                                        after_id, ord)
              CROSS JOIN LATERAL (
                  SELECT r.id, r.rank, r.cost, r.slots, r.dequeue_at
                    FROM (SELECT q.id, q.cost, q.slots, q.dequeue_at, pg_catalog.row_number() OVER w AS rank,
                                 pg_catalog.sum(q.cost) OVER w AS spent,
                                 pg_catalog.sum(least(q.slots, p.cap)) OVER w AS taken
                            FROM (SELECT mm.id, mm.dequeue_at, least(mm.cost, coalesce(p.burst, mm.cost))::bigint AS cost,
                                         mm.slots
                                    FROM lonnymq_message mm
                                   WHERE mm.channel_id = p.channel_id
                                     AND mm.lease_until IS NULL
                                     AND mm.dequeue_at <= v_now
                                     AND (mm.dequeue_at, mm.id) > (coalesce(p.after_at, -1), coalesce(p.after_id, -1))
                                   ORDER BY mm.dequeue_at, mm.id
                                   LIMIT least(p.room::bigint, (p.weight - p.used)::bigint + v_rounds * p.weight::bigint,
                                               v_batch::bigint)
                                     FOR UPDATE OF mm SKIP LOCKED) q
                          WINDOW w AS (ORDER BY q.dequeue_at, q.id)) r
                   WHERE (p.tokens IS NULL OR r.spent <= p.tokens) AND (p.cap IS NULL OR r.taken <= p.slot_room)
              ) m
             ORDER BY 4, p.ord, m.rank
          ) x;
    ELSE
        SELECT pg_catalog.array_agg(x.id), pg_catalog.array_agg(x.ord), pg_catalog.array_agg(x.rnd),
               pg_catalog.array_agg(x.slots), pg_catalog.array_agg(x.dequeue_at)
          INTO v_msg_ids, v_msg_ords, v_msg_rounds, v_msg_slots, v_msg_dqs
          FROM (
            SELECT m.id, m.rank, p.ord, (p.used + m.rank - 1) / p.weight AS rnd, m.slots, m.dequeue_at
              FROM ROWS FROM (pg_catalog.unnest(v_ch_ids), pg_catalog.unnest(v_quotas),
                              pg_catalog.unnest(v_weights), pg_catalog.unnest(v_used),
                              pg_catalog.unnest(v_after_at), pg_catalog.unnest(v_after_id))
                   WITH ORDINALITY AS p(channel_id, room, weight, used, after_at, after_id, ord)
              CROSS JOIN LATERAL (
                  SELECT q.id, q.slots, q.dequeue_at, pg_catalog.row_number() OVER (ORDER BY q.dequeue_at, q.id) AS rank
                    FROM (SELECT mm.id, mm.dequeue_at, mm.slots
                            FROM lonnymq_message mm
                           WHERE mm.channel_id = p.channel_id
                             AND mm.lease_until IS NULL
                             AND mm.dequeue_at <= v_now
                             AND (mm.dequeue_at, mm.id) > (coalesce(p.after_at, -1), coalesce(p.after_id, -1))
                           ORDER BY mm.dequeue_at, mm.id
                           LIMIT least(p.room::bigint, (p.weight - p.used)::bigint + v_rounds * p.weight::bigint,
                                       v_batch::bigint)
                             FOR UPDATE OF mm SKIP LOCKED) q
              ) m
             ORDER BY 4, p.ord, m.rank
          ) x;
        IF v_limited IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.unnest(v_msg_slots) AS u(n) WHERE u.n > 1) THEN
            -- Each capped channel keeps its candidates while their slots fit (in rank order).
            SELECT pg_catalog.array_agg(k.id ORDER BY k.pos), pg_catalog.array_agg(k.ord ORDER BY k.pos),
                   pg_catalog.array_agg(k.rnd ORDER BY k.pos), pg_catalog.array_agg(k.slots ORDER BY k.pos),
                   pg_catalog.array_agg(k.dq ORDER BY k.pos)
              INTO v_msg_ids, v_msg_ords, v_msg_rounds, v_msg_slots, v_msg_dqs
              FROM (SELECT u.id, u.ord, u.rnd, u.slots, u.dq, u.pos,
                           pg_catalog.sum(least(u.slots, v_caps[u.ord::integer])) OVER (PARTITION BY u.ord ORDER BY u.pos) AS taken
                      FROM ROWS FROM (pg_catalog.unnest(v_msg_ids), pg_catalog.unnest(v_msg_ords),
                                      pg_catalog.unnest(v_msg_rounds), pg_catalog.unnest(v_msg_slots),
                                      pg_catalog.unnest(v_msg_dqs))
                           WITH ORDINALITY AS u(id, ord, rnd, slots, dq, pos)) k
             WHERE v_caps[k.ord::integer] IS NULL OR k.taken <= v_slot_rooms[k.ord::integer];
        END IF;
    END IF;
    IF NOT v_after THEN
        -- A scan from the front: what it read decides where the next ones start.
        v_ready_read := pg_catalog.pg_stat_get_xact_tuples_returned('lonnymq_message_ready_idx'::regclass) - v_ready_read;
        IF v_ready_read > 1000 OR v_ready_state <> '' THEN
            PERFORM lonnymq_ready_from_v1(p_queue, v_now, v_ready_read, coalesce(pg_catalog.cardinality(v_msg_ids), 0));
        END IF;
    END IF;
    -- Cut to the batch, and to what a queue-wide bucket's tokens pay for (in round-robin
    -- order, each message charged at most the queue's burst). The channels whose round the
    -- cut interrupted are owed the rest of it: they keep their place in the rotation (step 4).
    v_keep := least(coalesce(pg_catalog.cardinality(v_msg_ids), 0), v_batch);
    -- A queue-wide cap: what its free slots hold, in round-robin order (each message counted
    -- at most the cap). v_q_slot_need: the slots the first message left out asks (the queue
    -- waits for them: lonnymq_next_due_v1); 1 when none was left out for want of slots.
    IF v_qc.max_concurrency IS NOT NULL AND v_keep > 0 THEN
        SELECT pg_catalog.count(*) FILTER (WHERE s.taken <= v_qc.max_concurrency - v_qc.in_flight),
               coalesce((pg_catalog.array_agg(s.slots ORDER BY s.pos)
                             FILTER (WHERE s.taken > v_qc.max_concurrency - v_qc.in_flight))[1], 1)
          INTO v_q_keep, v_q_slot_need
          FROM (SELECT least(u.slots, v_qc.max_concurrency) AS slots, u.pos,
                       pg_catalog.sum(least(u.slots, v_qc.max_concurrency)) OVER (ORDER BY u.pos) AS taken
                  FROM pg_catalog.unnest(v_msg_slots[1:v_keep]) WITH ORDINALITY AS u(slots, pos)) s;
        v_keep := v_q_keep;
        IF v_keep = 0 AND v_q_slot_need <> v_qc.head_slots THEN
            -- Nothing leased (step 3 writes the queue's row otherwise).
            UPDATE lonnymq_queue_config qc SET head_slots = v_q_slot_need WHERE qc.queue = p_queue;
        END IF;
    END IF;
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
        v_msg_slots := CASE WHEN v_keep > 0 THEN v_msg_slots[1:v_keep] END;
        v_msg_dqs := CASE WHEN v_keep > 0 THEN v_msg_dqs[1:v_keep] END;
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
            SELECT pg_catalog.sum(u.slots) INTO v_q_leased FROM pg_catalog.unnest(v_msg_slots) AS u(slots);
            SELECT pg_catalog.sum(least(u.cost, coalesce(v_qc.rate_burst, 1000000)::bigint)) INTO v_q_spent
              FROM pg_catalog.unnest(v_msg_costs) AS u(cost);
            v_q_level := v_q_level - v_q_spent * v_qc.rate_period_ms;
            UPDATE lonnymq_queue_config qc
               SET in_flight = qc.in_flight + CASE WHEN qc.max_concurrency IS NOT NULL THEN v_q_leased ELSE 0 END,
                   head_slots = v_q_slot_need,
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
    --    A capped channel's slots are its leases' count unless one took more than one.
    v_many_slots := v_limited IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.unnest(v_msg_slots) AS u(n) WHERE u.n > 1);
    SELECT pg_catalog.array_agg(n.channel_id), pg_catalog.array_agg(n.tid), pg_catalog.array_agg(n.head),
           pg_catalog.array_agg(n.last_floor), pg_catalog.array_agg(n.leased), pg_catalog.array_agg(n.release_interval_ms),
           pg_catalog.array_agg(n.next_token_at), pg_catalog.array_agg(n.rate_count),
           pg_catalog.array_agg(n.rate_period_ms), pg_catalog.array_agg(n.spent), pg_catalog.array_agg(n.head_cost),
           pg_catalog.array_agg(n.hold_until), pg_catalog.array_agg(n.slots_taken), pg_catalog.array_agg(n.head_slots),
           pg_catalog.array_agg(n.taken_at), pg_catalog.array_agg(n.taken_id)
      INTO v_next_ids, v_next_tids, v_next_at, v_next_last, v_next_leased, v_intervals, v_next_token, v_rate_n,
           v_rate_period, v_next_spent, v_head_costs, v_holds, v_next_slots, v_head_slots, v_taken_at, v_taken_id
      FROM (
        SELECT p.channel_id, p.tid, h.dequeue_at AS head, c.last_dequeue_at + c.release_interval_ms AS last_floor,
               l.n AS leased,
               -- The last message it leased here (written as taken_at, taken_id), or what it had.
               coalesce(v_msg_dqs[l.at], c.taken_at) AS taken_at,
               CASE WHEN l.at IS NULL THEN c.taken_id ELSE v_msg_ids[l.at] END AS taken_id,
               c.release_interval_ms, c.next_token_at, c.rate_count, c.rate_period_ms,
               -- The tokens its leases took (a bucket's channel only), and its next head's cost.
               CASE WHEN c.rate_count IS NOT NULL
                    THEN (SELECT coalesce(pg_catalog.sum(v_msg_costs[k.at]), 0)
                            FROM pg_catalog.unnest(pg_catalog.array_positions(v_msg_ords, p.ord)) AS k(at)) END AS spent,
               h.cost AS head_cost, c.hold_until,
               -- The slots its leases took (a capped channel only), and its next head's.
               CASE WHEN c.max_concurrency IS NULL THEN 0
                    WHEN NOT v_many_slots THEN l.n
                    ELSE (SELECT coalesce(pg_catalog.sum(v_msg_slots[k.at]), 0)
                            FROM pg_catalog.unnest(pg_catalog.array_positions(v_msg_ords, p.ord)) AS k(at)) END
                   AS slots_taken,
               coalesce(h.slots, 1) AS head_slots
          FROM ROWS FROM (pg_catalog.unnest(v_ch_ids), pg_catalog.unnest(v_ch_tids)) WITH ORDINALITY AS p(channel_id, tid, ord)
          -- The row versions step 1 locked, by their tids: a lookup by id reads every version
          -- of the row in the primary key, which a held snapshot keeps ("= ANY" gives the
          -- planner a tid scan; a plain join to unnest() is planned as a hash join over a
          -- sequential scan of every channel).
          JOIN lonnymq_channel c ON c.ctid = p.tid AND c.ctid = ANY (v_ch_tids) AND c.id = p.channel_id
          -- l: how many it leased here, and the last one's position in the batch. Its next
          -- ready message starts after that one (or where step 2 started, when it leased
          -- none), not at the front of its range in the ready index,
          -- where a held snapshot keeps an entry for every message taken since. What it cannot
          -- see there (a message put back or enqueued behind them since step 2, one another
          -- session held locked) only ever makes the head later: by at most the tolerance, or
          -- far enough to park the channel or move it ahead, which looks again from the front
          -- below, under the channel's lock.
          CROSS JOIN LATERAL (
              SELECT pg_catalog.count(*)::integer AS n, pg_catalog.max(k.at) AS at
                FROM pg_catalog.unnest(pg_catalog.array_positions(v_msg_ords, p.ord)) AS k(at)
          ) l
          LEFT JOIN LATERAL (
              SELECT mm.dequeue_at, mm.cost, mm.slots FROM lonnymq_message mm
               WHERE mm.channel_id = p.channel_id AND mm.lease_until IS NULL
                 AND (mm.dequeue_at, mm.id) > (coalesce(v_msg_dqs[l.at], v_after_at[p.ord], -1),
                                               coalesce(v_msg_ids[l.at], v_after_id[p.ord], -1))
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
                ELSIF v_next_leased[i] = 0 THEN
                    -- Its head may lie before where step 2 started (a lease given back): the
                    -- next candidate scan starts at the front.
                    v_taken_at[i] := NULL;
                    v_taken_id[i] := NULL;
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
           in_flight = c.in_flight + u.slots_taken,
           head_slots = u.head_slots,
           bucket_level = CASE WHEN u.leased > 0 THEN u.level ELSE c.bucket_level END,
           next_token_at = u.token_at,
           taken_at = u.taken_at,
           taken_id = u.taken_id
      FROM ROWS FROM (pg_catalog.unnest(v_next_ids), pg_catalog.unnest(v_next_at), pg_catalog.unnest(v_next_leased),
                      pg_catalog.unnest(v_owed), pg_catalog.unnest(v_next_level), pg_catalog.unnest(v_next_token),
                      pg_catalog.unnest(v_next_slots), pg_catalog.unnest(v_head_slots), pg_catalog.unnest(v_next_tids),
                      pg_catalog.unnest(v_taken_at), pg_catalog.unnest(v_taken_id))
           WITH ORDINALITY AS u(channel_id, next_at, leased, owed, level, token_at, slots_taken, head_slots, tid,
                                taken_at, taken_id, ord)
     WHERE c.ctid = u.tid AND c.ctid = ANY (v_next_tids) AND c.id = u.channel_id;
END
$$;
