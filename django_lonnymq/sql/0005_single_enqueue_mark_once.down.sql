-- django-lonnymq 0005, reversed: lonnymq_mark_v1 as 0001 installed it (a mark per
-- transaction and channel that needs one).

-- A producer's wake-up: leave a mark for a channel whose next turn is not early enough for a
-- message due at p_dequeue_at. Takes no row lock: the mark becomes visible when the producer
-- commits and the next dequeue applies it. The caller holds the channel's shared advisory
-- lock, so no dequeuer parks it meanwhile (docs/locking.md). Under REPEATABLE READ or
-- SERIALIZABLE the producer's snapshot may predate a park: it always marks. Notifies the
-- queue's workers (delivered at commit) when it marked. Scalar statements on purpose: their
-- generic plans are primary-key probes, so plpgsql does not re-plan them on every call.
CREATE OR REPLACE FUNCTION lonnymq_mark_v1(p_queue text, p_channel_id bigint, p_dequeue_at bigint,
                                p_tolerance_ms bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_next  bigint;
    v_floor bigint;
BEGIN
    IF current_setting('transaction_isolation') = 'read committed' THEN
        SELECT c.next_dequeue_at, c.last_dequeue_at + c.release_interval_ms INTO v_next, v_floor
          FROM lonnymq_channel c WHERE c.id = p_channel_id;
        IF v_next IS NOT NULL AND v_next <= greatest(p_dequeue_at, v_floor) + p_tolerance_ms THEN
            RETURN false;
        END IF;
    END IF;
    -- A later message of the same transaction rewrites its mark only when it is due earlier
    -- (a rewrite on every call would pile up row versions inside one long transaction).
    INSERT INTO lonnymq_wake AS w (queue, channel_id, dequeue_at)
    VALUES (p_queue, p_channel_id, p_dequeue_at)
    ON CONFLICT (channel_id, xact) DO UPDATE SET dequeue_at = excluded.dequeue_at
        WHERE excluded.dequeue_at < w.dequeue_at;
    PERFORM pg_notify('lonnymq_wakeup', p_queue);
    RETURN true;
END
$$;
