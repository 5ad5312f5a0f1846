-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0046: api.consume(), the channel's token bucket spent outside jobs.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- Take p_tokens tokens of a channel's token bucket for work done outside a job (a web
-- request of the same tenant), so that jobs and callers spend one budget. The bucket is the
-- one lonnymq_dequeue_v1 refills and spends, read with the same formula under the same row
-- lock: all or nothing. Taken, the channel's bucket and next turn move as after a release;
-- refused, nothing is written and retry_after_ms says when the tokens will be there (if no
-- job takes them first). The queue-wide bucket is not spent: it limits what the workers
-- release, not the tenant's budget (docs/limits-and-progress.md).
CREATE FUNCTION lonnymq_consume_v1(p_queue text, p_channel text, p_tokens integer)
RETURNS TABLE (ok boolean, retry_after_ms bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_c     lonnymq_channel%ROWTYPE;
    v_now   bigint;
    v_full  bigint;
    v_level bigint;
    v_cost  bigint;
BEGIN
    IF p_tokens IS NULL OR p_tokens < 1 OR p_tokens > 1000000 THEN
        PERFORM lonnymq_raise_invalid_v1('tokens', 'must be an integer from 1 to 1000000',
                                         coalesce(p_tokens::text, 'null'));
    END IF;
    -- Waits for a dequeuer holding the row (it holds it for one call); a dequeuer that
    -- finds it held skips the channel this time.
    SELECT * INTO v_c FROM lonnymq_channel c
     WHERE c.queue = p_queue AND c.name = p_channel
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('channel', 'must name a channel of queue '
                                         || pg_catalog.quote_literal(coalesce(p_queue, '')),
                                         pg_catalog.quote_nullable(p_channel));
    END IF;
    IF v_c.rate_count IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('channel', 'must have a rate limit to consume from',
                                         pg_catalog.quote_literal(p_channel));
    END IF;
    IF p_tokens > v_c.rate_burst THEN
        PERFORM lonnymq_raise_invalid_v1('tokens', 'must be at most the bucket''s capacity (burst '
                                         || v_c.rate_burst || ')', p_tokens::text);
    END IF;
    -- Never refill from a release "after" this call's clock reading: read the bucket at the
    -- later of the two, as the dequeue refuses to pick such a channel.
    v_now := greatest(lonnymq_now_ms_v1(), coalesce(v_c.last_dequeue_at, 0));
    v_full := v_c.rate_burst::bigint * v_c.rate_period_ms;
    v_level := CASE WHEN v_c.bucket_level IS NULL OR v_c.last_dequeue_at IS NULL THEN v_full
                    ELSE least(v_full, v_c.bucket_level + least(v_now - v_c.last_dequeue_at, v_full)
                                                          * v_c.rate_count::bigint) END;
    v_cost := p_tokens::bigint * v_c.rate_period_ms;
    IF v_level < v_cost THEN
        RETURN QUERY SELECT false, (v_cost - v_level + v_c.rate_count - 1) / v_c.rate_count;
        RETURN;
    END IF;
    v_level := v_level - v_cost;
    -- As a release: the bucket's fill now, its next token, and the channel's next turn no
    -- earlier than that token (the dequeue would find it empty before).
    UPDATE lonnymq_channel c
       SET bucket_level = v_level,
           last_dequeue_at = v_now,
           next_token_at = n.token_at,
           next_dequeue_at = CASE WHEN c.next_dequeue_at IS NULL THEN NULL
                                  ELSE greatest(c.next_dequeue_at, n.token_at) END
      FROM (SELECT CASE WHEN v_level >= v_c.rate_period_ms THEN v_now
                        ELSE v_now + (v_c.rate_period_ms - v_level + v_c.rate_count - 1) / v_c.rate_count
                   END AS token_at) n
     WHERE c.id = v_c.id;
    RETURN QUERY SELECT true, 0::bigint;
END
$$;
