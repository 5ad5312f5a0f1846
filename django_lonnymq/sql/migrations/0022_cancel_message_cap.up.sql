-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0022: the error of a cancel that names unknown ids stays short.
-- - lonnymq_cancel_v2 (same name, arguments, results and SQLSTATE LQ170): the message gives
--   how many ids name no message and the first 20 of them ("... and N more"), instead of
--   every one (a cancel of a million unknown ids raised a message of millions of
--   characters). DETAIL still lists every such id, comma-separated.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- Cancel messages: one waiting (ready or scheduled) is deleted at once (and frees its dedup
-- key); one in flight is marked cancel_requested, and its worker interrupts the handler at
-- its next heartbeat and dead-letters it as 'cancelled'. An id that names no message fails
-- the whole call with LQ170 (nothing is cancelled) unless p_missing_ok. The message rows
-- are locked in id order first, so a message cannot finish between the check and the mark.
-- Returns a row per message cancelled or marked.
CREATE OR REPLACE FUNCTION lonnymq_cancel_v2(p_ids bigint[], p_missing_ok boolean DEFAULT false)
RETURNS TABLE (id bigint, running boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_found   bigint[];
    v_running bigint[];
    v_missing bigint[];
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    SELECT coalesce(pg_catalog.array_agg(l.id), ARRAY[]::bigint[]),
           coalesce(pg_catalog.array_agg(l.id) FILTER (WHERE l.leased), ARRAY[]::bigint[])
      INTO v_found, v_running
      FROM (SELECT m.id, m.lease_token IS NOT NULL AS leased FROM lonnymq_message m
             WHERE m.id = ANY (p_ids) ORDER BY m.id FOR UPDATE) l;
    IF NOT coalesce(p_missing_ok, false) THEN
        SELECT pg_catalog.array_agg(DISTINCT u.id ORDER BY u.id) INTO v_missing
          FROM pg_catalog.unnest(p_ids) AS u(id)
         WHERE u.id IS NULL OR u.id <> ALL (v_found);
        IF v_missing IS NOT NULL THEN
            -- The message names the first 20 (a call may name a million); DETAIL has them all.
            RAISE EXCEPTION 'cannot cancel % message(s): not found (never enqueued, or already acked, cancelled or dead); nothing was cancelled: %',
                pg_catalog.cardinality(v_missing),
                pg_catalog.array_to_string(v_missing[1:20], ', ', 'null')
                    OPERATOR(pg_catalog.||) CASE WHEN pg_catalog.cardinality(v_missing) > 20
                        THEN pg_catalog.format(' and %s more', pg_catalog.cardinality(v_missing) - 20) ELSE '' END
                USING ERRCODE = 'LQ170', DETAIL = pg_catalog.array_to_string(v_missing, ',', 'null');
        END IF;
    END IF;
    UPDATE lonnymq_message m SET cancel_requested = true
     WHERE m.id = ANY (v_running) AND NOT m.cancel_requested;
    WITH gone AS (
        DELETE FROM lonnymq_message m
         WHERE m.id = ANY (v_found) AND m.lease_token IS NULL
        RETURNING m.id, m.channel_id, m.dedup_key
    )
    DELETE FROM lonnymq_dedup d USING gone g
     WHERE d.channel_id = g.channel_id AND d.dedup_key = g.dedup_key AND d.message_id = g.id;
    RETURN QUERY
        SELECT f.id, f.id = ANY (v_running) FROM pg_catalog.unnest(v_found) AS f(id) ORDER BY f.id;
END
$$;
