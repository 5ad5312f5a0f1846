-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0005: a single enqueue leaves no second wake-up mark where a committed one
-- will do, as lonnymq_mark_many_v1 does since 0004. Name, signature and result stay.

-- A producer's wake-up: leave a mark for a channel whose next turn is not early enough for a
-- message due at p_dequeue_at. Takes no row lock: the mark becomes visible when the producer
-- commits and the next dequeue applies it. The caller holds the channel's shared advisory
-- lock, so no dequeuer parks it meanwhile (docs/locking.md). Under READ COMMITTED a mark
-- already there and early enough (committed, or this transaction's own) will do: only a
-- dequeue that applies it deletes it. So enqueues into a channel no worker has visited yet
-- leave one mark, not one per transaction. Under REPEATABLE READ or SERIALIZABLE the
-- producer's snapshot may predate a park: it always marks. Notifies the queue's workers
-- (delivered at commit) when it marked. Scalar statements on purpose: their generic plans
-- are index probes, so plpgsql does not re-plan them on every call.
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
        PERFORM FROM lonnymq_wake w
          WHERE w.channel_id = p_channel_id AND w.dequeue_at <= p_dequeue_at + p_tolerance_ms;
        IF FOUND THEN
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
