-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0048: message.progress(), a handler's progress kept apart from the message.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- How far a message's handler got: one row per message, written by its worker at most once
-- per LONNYMQ_PROGRESS_INTERVAL (handlers report to the worker in memory; the worker writes
-- every message's latest report in one call) and once more when the run ends. Apart from
-- lonnymq_message, so a report never writes the queue's hot table (nor its indexes), and kept
-- after the message is gone: the workers' housekeeping deletes rows older than
-- LONNYMQ_PROGRESS_RETENTION whose message is neither waiting, running nor dead
-- (lonnymq_progress_prune_v1). No foreign key, so acks pay nothing for it.
CREATE TABLE lonnymq_progress (
    message_id  bigint           NOT NULL,
    queue       text             NOT NULL,
    channel     text             NOT NULL,
    done        double precision NOT NULL,
    total       double precision NULL,
    note        text             NOT NULL DEFAULT '',
    updated_at  bigint           NOT NULL,
    CONSTRAINT lonnymq_progress_pkey PRIMARY KEY (message_id),
    -- NaN sorts above every number in PostgreSQL: "<= 1e15" refuses it, and infinity.
    CONSTRAINT lonnymq_progress_done_range CHECK (done >= 0::double precision AND done <= 1e15::double precision),
    CONSTRAINT lonnymq_progress_total_range CHECK (total IS NULL OR (total > 0::double precision AND total <= 1e15::double precision)),
    CONSTRAINT lonnymq_progress_done_within_total CHECK (total IS NULL OR done <= total),
    CONSTRAINT lonnymq_progress_note_length CHECK (pg_catalog.char_length(note) <= 200),
    CONSTRAINT lonnymq_progress_updated_range CHECK (updated_at BETWEEN 0 AND 253402300799999)
);
-- The dashboard's latest reports of a queue; the prune's oldest rows.
CREATE INDEX lonnymq_progress_queue_idx ON lonnymq_progress (queue, updated_at);
CREATE INDEX lonnymq_progress_updated_idx ON lonnymq_progress (updated_at);

-- Record the latest progress of several messages in one call (a worker's reports since its
-- last write; eager mode's one report). Each report is checked as the table's CHECKs do,
-- naming the field, before anything is written. A message reported twice keeps its last report.
CREATE FUNCTION lonnymq_progress_v1(
    p_ids bigint[], p_queues text[], p_channels text[], p_done double precision[],
    p_totals double precision[], p_notes text[]
) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n   integer := coalesce(pg_catalog.cardinality(p_ids), 0);
    v_bad record;
    v_written integer;
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    IF coalesce(pg_catalog.cardinality(p_queues), 0) <> v_n
       OR coalesce(pg_catalog.cardinality(p_channels), 0) <> v_n
       OR coalesce(pg_catalog.cardinality(p_done), 0) <> v_n
       OR coalesce(pg_catalog.cardinality(p_totals), 0) <> v_n
       OR coalesce(pg_catalog.cardinality(p_notes), 0) <> v_n THEN
        PERFORM lonnymq_raise_invalid_v1('progress', 'must give one queue, channel, done, total and note per id',
                                         v_n::text || ' ids');
    END IF;
    SELECT u.* INTO v_bad
      FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_done), pg_catalog.unnest(p_totals),
                      pg_catalog.unnest(p_notes)) AS u(id, done, total, note)
     WHERE u.id IS NULL OR u.done IS NULL OR NOT (u.done >= 0::double precision AND u.done <= 1e15::double precision)
        OR (u.total IS NOT NULL AND NOT (u.total > 0::double precision AND u.total <= 1e15::double precision))
        OR u.done > u.total OR u.note IS NULL OR pg_catalog.char_length(u.note) > 200
     LIMIT 1;
    IF FOUND THEN
        IF v_bad.id IS NULL THEN
            PERFORM lonnymq_raise_invalid_v1('id', 'must not be null', NULL);
        ELSIF v_bad.done IS NULL OR NOT (v_bad.done >= 0::double precision AND v_bad.done <= 1e15::double precision) THEN
            PERFORM lonnymq_raise_invalid_v1('done', 'must be a finite number from 0 to 1e15', v_bad.done::text);
        ELSIF v_bad.total IS NOT NULL AND NOT (v_bad.total > 0::double precision AND v_bad.total <= 1e15::double precision) THEN
            PERFORM lonnymq_raise_invalid_v1('total', 'must be a finite number above 0, at most 1e15',
                                             v_bad.total::text);
        ELSIF v_bad.done > v_bad.total THEN
            PERFORM lonnymq_raise_invalid_v1('done', 'must be at most total (' || v_bad.total::text || ')',
                                             v_bad.done::text);
        ELSE
            PERFORM lonnymq_raise_invalid_v1('note', 'must be at most 200 characters',
                                             coalesce(pg_catalog.char_length(v_bad.note)::text || ' characters', 'null'));
        END IF;
    END IF;
    PERFORM lonnymq_check_names_v1(q, c)
       FROM ROWS FROM (pg_catalog.unnest(p_queues), pg_catalog.unnest(p_channels)) AS n(q, c);
    INSERT INTO lonnymq_progress AS p (message_id, queue, channel, done, total, note, updated_at)
    SELECT DISTINCT ON (u.id) u.id, u.queue, u.channel, u.done, u.total, u.note, lonnymq_now_ms_v1()
      FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_queues), pg_catalog.unnest(p_channels),
                      pg_catalog.unnest(p_done), pg_catalog.unnest(p_totals), pg_catalog.unnest(p_notes))
           WITH ORDINALITY AS u(id, queue, channel, done, total, note, ord)
     ORDER BY u.id, u.ord DESC
    ON CONFLICT (message_id) DO UPDATE
       SET queue = EXCLUDED.queue, channel = EXCLUDED.channel, done = EXCLUDED.done,
           total = EXCLUDED.total, note = EXCLUDED.note, updated_at = EXCLUDED.updated_at;
    GET DIAGNOSTICS v_written = ROW_COUNT;
    RETURN v_written;
END
$$;

-- Progress rows older than p_retention_ms whose message is gone (acked, purged): at most
-- p_limit a call, oldest first. A message still waiting, running or dead keeps its row.
CREATE FUNCTION lonnymq_progress_prune_v1(p_retention_ms bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_deleted integer;
BEGIN
    PERFORM lonnymq_check_range_v1('retention', p_retention_ms, 0::bigint, 3155760000000::bigint, false);
    DELETE FROM lonnymq_progress p
     WHERE p.message_id IN (
        SELECT o.message_id FROM lonnymq_progress o
         WHERE o.updated_at < lonnymq_now_ms_v1() - p_retention_ms
           AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.id = o.message_id)
           AND NOT EXISTS (SELECT 1 FROM lonnymq_dead_message d WHERE d.id = o.message_id)
         ORDER BY o.updated_at
         LIMIT greatest(p_limit, 0)
           FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;
