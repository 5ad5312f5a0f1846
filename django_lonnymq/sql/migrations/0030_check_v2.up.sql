-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0030: the scheduler check whose work does not grow with the backlog
-- (api.check(), the health command; docs/admin.md, "At size").
-- - lonnymq_check_v2 (new): lonnymq_check_v1's invariants, with the leases read along the
--   lease index and a head looked up only for the channels that could be stranded.
-- - lonnymq_check_limits_v2 (new): lonnymq_check_limits_v1's rows, with the drifted channels
--   picked from the row's own columns before their limits are spelled out.
-- The v1 functions stay as they were, for the code of the previous release
-- (superseded.sql).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- Scheduler invariants, for tests, api.check() and the health command. One row per problem:
--   in_flight_mismatch: in_flight differs from the leases that took a slot;
--   queue_in_flight_mismatch: a queue-wide cap's in_flight differs from the leases of the
--     queue that took a queue slot (channel_id and channel NULL);
--   stranded: a ready message is due but its channel will not look at it.
-- Its work does not grow with the backlog (docs/admin.md, "At size"): the leases are read
-- along the lease index (a slot or a queue slot needs a lease: CHECKs of lonnymq_message),
-- and only the channels that could be stranded have their head looked up: a channel whose
-- turn is at most now + grace away cannot be (the turn it waits for has come, or is within
-- grace), so the one-probe-per-channel walk is over the parked channels (no turn) and those
-- whose turn is further off. One clock reading serves the whole check.
CREATE FUNCTION lonnymq_check_v2(p_grace_ms bigint DEFAULT 1000)
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
                                                c.next_token_at, v_now) + p_grace_ms)
           -- A producer's committed wake-up mark is applied by the next dequeue.
           AND NOT EXISTS (SELECT 1 FROM lonnymq_wake w
                            WHERE w.channel_id = c.id
                              AND w.dequeue_at <= greatest(h.dequeue_at, v_now) + p_grace_ms);
END
$$;

-- Channels whose limits drifted from where they come from: one row per limit that is not
-- the channel's own and differs from its plan's value (or, without a plan, the default).
-- lonnymq_check_v2's companion (the named statement check runs both). The channel row's own
-- columns pick the drifted channels first (typed comparisons, true for every row the text
-- comparison below reports); only those are spelled out limit by limit.
CREATE FUNCTION lonnymq_check_limits_v2()
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
     WHERE ((NOT c.own_weight AND c.weight IS DISTINCT FROM coalesce(p.weight, 1))
            OR (NOT c.own_max_concurrency AND c.max_concurrency IS DISTINCT FROM p.max_concurrency)
            OR (NOT c.own_release_interval
                AND c.release_interval_ms IS DISTINCT FROM coalesce(p.release_interval_ms, 0::bigint))
            OR (NOT c.own_rate AND (c.rate_count, c.rate_period_ms, c.rate_burst)
                                   IS DISTINCT FROM (p.rate_count, p.rate_period_ms, p.rate_burst)))
       AND v.inherited AND v.actual IS DISTINCT FROM v.expected
$$;
