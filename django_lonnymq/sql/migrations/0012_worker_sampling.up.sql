-- django-lonnymq 0012: workers record the dashboard's samples themselves, one at a time
-- (lonnymq_record_samples_due_v1, under an advisory lock), so no cron job is needed.

-- Functions created here pin the app's schema (SET search_path FROM CURRENT).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- One sample per queue if none was recorded in the last p_interval_ms, by one caller at a
-- time: every worker calls this on its own clock, the first to take the sampler's lock
-- records (lonnymq_record_samples_v2, pruning samples older than p_keep_ms) and the others
-- find the lock taken, or a sample too recent, and record nothing. Any recorder counts
-- (`lonnymq_stats --record` too), so samples are at least p_interval_ms apart. Returns the
-- rows recorded (0: not due, or another caller is recording).
-- The lock: the two-key form with the queue's namespace and key -210, which no channel's key
-- (channel id modulo 2^31-1, never negative) can take (docs/locking.md).
CREATE FUNCTION lonnymq_record_samples_due_v1(p_interval_ms bigint, p_keep_ms bigint)
RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_recorded integer;
BEGIN
    PERFORM lonnymq_check_range_v1('interval', p_interval_ms, 1000::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_range_v1('keep', p_keep_ms, 1::bigint, 31622400000::bigint, false);
    IF NOT pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), -210) THEN
        RETURN 0;
    END IF;
    -- Under the lock, and in a statement that began after the previous holder committed.
    IF EXISTS (SELECT 1 FROM lonnymq_queue_sample s
                WHERE s.at > pg_catalog.clock_timestamp()
                             - pg_catalog.make_interval(secs => p_interval_ms::double precision / 1000::double precision)) THEN
        RETURN 0;
    END IF;
    SELECT pg_catalog.count(*)::integer INTO v_recorded FROM lonnymq_record_samples_v2(p_keep_ms);
    RETURN v_recorded;
END
$$;
